package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/vk"
)

// TestSharedErrorWrapsOneSentinel: OpenOn's refusals keep vk.Borrow's
// sentinel (ErrOption for bad arguments, ErrNoDriver for a missing loader)
// and make any other failure, a Vulkan call failing on the host's device,
// ErrDevice; each wraps exactly one of the three and the error it came
// from.
func TestSharedErrorWrapsOneSentinel(t *testing.T) {
	three := []error{core.ErrOption, core.ErrNoDriver, core.ErrDevice}
	for _, c := range []struct {
		in, want error
	}{
		{core.Errorf(core.ErrOption, "shared device: queue index 5"), core.ErrOption},
		{fmt.Errorf("%w: cannot load libvulkan.so.1", vk.ErrNoDriver), core.ErrNoDriver},
		{errors.New("vk: vkGetDeviceProcAddr: a core Vulkan 1.0 command is missing"), core.ErrDevice},
		{&core.VulkanError{Call: "vkCreatePipelineCache", Result: -1, What: "out of host memory"}, core.ErrDevice},
	} {
		err := sharedError(c.in)
		if !errors.Is(err, c.in) {
			t.Errorf("%v: became %v, which does not wrap it", c.in, err)
		}
		for _, s := range three {
			if errors.Is(err, s) != (s == c.want) {
				t.Errorf("%v: error %v, want it to wrap %v and not the other of %v", c.in, err, c.want, three)
			}
		}
	}
}
