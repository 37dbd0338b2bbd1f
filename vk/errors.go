package vk

import (
	"fmt"

	"github.com/vkattn/vkattn/core"

	vulkan "github.com/vulkan-go/vulkan"
)

// Error is a failed Vulkan call (core's, so that packages without cgo
// can name it).
type Error = core.VulkanError

// check turns a VkResult into an error naming call; positive results such as
// VK_TIMEOUT or VK_INCOMPLETE are errors too unless the caller handles them first.
func check(call string, r vulkan.Result) error {
	if r == vulkan.Success {
		return nil
	}
	return &Error{Call: call, Result: int32(r), What: fmt.Sprint(vulkan.Error(r))}
}
