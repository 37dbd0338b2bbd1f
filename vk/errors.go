package vk

import (
	"fmt"

	vulkan "github.com/vulkan-go/vulkan"
)

// Error is a failed Vulkan call: which call, and the VkResult it returned.
type Error struct {
	Call   string
	Result vulkan.Result
}

func (e *Error) Error() string {
	return fmt.Sprintf("vk: %s failed: %v", e.Call, vulkan.Error(e.Result))
}

// check turns a VkResult into an error naming call; positive results such as
// VK_TIMEOUT or VK_INCOMPLETE are errors too unless the caller handles them first.
func check(call string, r vulkan.Result) error {
	if r == vulkan.Success {
		return nil
	}
	return &Error{Call: call, Result: r}
}
