//go:build !viewer

package vk

import "errors"

// Without the viewer build tag vkattn makes no window: these stand in for
// swapchain.go's surfaces, which the instance and device configuration
// name, so that a headless binary carries no presentation code.

// surfaceCalls has no entry points to resolve.
type surfaceCalls struct{}

// Surface is a window's surface, which a headless build never makes.
type Surface struct{}

// destroyLocked has nothing to destroy.
func (s *Surface) destroyLocked() {}

// presentFamily refuses: there is no window to present to.
func (in *Instance) presentFamily(PhysicalDevice, *Surface) (family uint32, timestamps bool, err error) {
	return 0, false, errors.New("vk: presenting to a window needs the viewer build (go build -tags viewer)")
}
