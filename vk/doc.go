// Package vk is vkattn's thin, safe layer over Vulkan: instance and device
// choice, buffers (with texel views), compute kernels (shader module,
// layouts, pipeline, descriptor sets), and recorded command buffers with
// fences and timestamps. Every call's VkResult becomes an *Error naming the
// call; objects are owned by their device and freed with it.
//
// Handles and the simple calls come from github.com/vulkan-go/vulkan. Calls
// whose create infos hold arrays or nested structs go through the C shims of
// calls.go instead: vulkan-go frees its C copies of those from a finalizer
// that a garbage collection can run while the call is still reading them.
// A struct passed to vulkan-go by pointer keeps vulkan-go's C copy until its
// Free method runs, so every such struct here is freed after the call.
package vk
