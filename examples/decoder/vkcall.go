package main

import (
	"fmt"
	"runtime/debug"
	"sync"

	vulkan "github.com/vulkan-go/vulkan"
)

// check turns a Vulkan call's result into an error naming the call.
// vulkan-go reports positive results (VK_TIMEOUT, VK_NOT_READY) as errors
// too: callers that expect one test for it before calling check.
func check(call string, r vulkan.Result) error {
	if r == vulkan.Success {
		return nil
	}
	return fmt.Errorf("%s: %w (VkResult %d)", call, vulkan.Error(r), int32(r))
}

var gcOff struct {
	sync.Mutex
	depth int
	saved int
}

// withoutGC runs f with the garbage collector held off. vulkan-go copies a
// slice-of-structs argument (create infos of pipelines, descriptor writes,
// submit infos, barriers) into C memory whose only owner is a finalizer
// on a variable that is unreachable once the copy is made: a collection
// that ends while the C call runs would free what the driver (or the
// validation layer) is still reading. SetGCPercent(-1) waits for a
// collection under way to finish and starts no other until restored.
func withoutGC(f func()) {
	gcOff.Lock()
	if gcOff.depth == 0 {
		gcOff.saved = debug.SetGCPercent(-1)
	}
	gcOff.depth++
	gcOff.Unlock()
	defer func() {
		gcOff.Lock()
		gcOff.depth--
		if gcOff.depth == 0 {
			debug.SetGCPercent(gcOff.saved)
		}
		gcOff.Unlock()
	}()
	f()
}
