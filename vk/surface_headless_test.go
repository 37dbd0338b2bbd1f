//go:build !viewer

package vk

import (
	"strings"
	"testing"
)

// checkNoWindow: without the viewer tag a device configured to present to
// a window is refused, saying what build presents.
func checkNoWindow(t *testing.T, inst *Instance, _ *Device) {
	t.Helper()
	if _, err := inst.NewDeviceWith(0, DeviceConfig{Present: &Surface{}}); err == nil || !strings.Contains(err.Error(), "viewer build") {
		t.Errorf("a device presenting to a window in a headless build: %v", err)
	}
}
