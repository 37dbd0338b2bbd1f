package core

import "fmt"

// VulkanError is a failed Vulkan call: which call, the VkResult it
// returned and that result's description.
type VulkanError struct {
	Call   string
	Result int32 // the VkResult
	What   string
}

func (e *VulkanError) Error() string {
	return fmt.Sprintf("vk: %s failed: %s", e.Call, e.What)
}
