//go:build viewer

package vk

import (
	"strings"
	"testing"
	"unsafe"
)

// checkNoWindow: a compute-only device makes no swapchain and a
// compute-only instance no surface, each an error naming the extension
// it lacks.
func checkNoWindow(t *testing.T, inst *Instance, dev *Device) {
	t.Helper()
	if _, err := dev.NewSwapchain(nil, 8, 8, nil); err == nil || !strings.Contains(err.Error(), SwapchainExtension) {
		t.Errorf("a swapchain on a device without %s: %v", SwapchainExtension, err)
	}
	if _, err := inst.NewSurface(func(unsafe.Pointer) (unsafe.Pointer, error) { return nil, nil }); err == nil ||
		!strings.Contains(err.Error(), "VK_KHR_surface") {
		t.Errorf("a surface on an instance without VK_KHR_surface: %v", err)
	}
}
