// C side of the presentation path (present.go, and swapchain.go in the
// viewer build): the device-level entry points vkattn resolves, and the
// image, semaphore, barrier, blit and submission calls made from C (their
// create infos hold arrays and nested structs).
#include <stdlib.h>
#include <vulkan/vulkan.h>

typedef struct {
	PFN_vkCreateSwapchainKHR createSwapchain;
	PFN_vkDestroySwapchainKHR destroySwapchain;
	PFN_vkGetSwapchainImagesKHR getSwapchainImages;
	PFN_vkAcquireNextImageKHR acquireNextImage;
	PFN_vkQueuePresentKHR queuePresent;
	PFN_vkCreateImage createImage;
	PFN_vkDestroyImage destroyImage;
	PFN_vkGetImageMemoryRequirements imageMemoryRequirements;
	PFN_vkAllocateMemory allocateMemory;
	PFN_vkFreeMemory freeMemory;
	PFN_vkBindImageMemory bindImageMemory;
	PFN_vkCreateImageView createImageView;
	PFN_vkDestroyImageView destroyImageView;
	PFN_vkCreateSemaphore createSemaphore;
	PFN_vkDestroySemaphore destroySemaphore;
	PFN_vkCmdPipelineBarrier cmdPipelineBarrier;
	PFN_vkCmdBlitImage cmdBlitImage;
	PFN_vkCmdCopyImageToBuffer cmdCopyImageToBuffer;
	PFN_vkQueueSubmit queueSubmit;
} vkattn_present_calls;

// 0 when the core entry points were found; *swapchain is 1 when those of
// VK_KHR_swapchain were too (the device enabled it). gdpa is the device's
// vkGetDeviceProcAddr (calls.go).
static int vkattn_resolve_present(PFN_vkGetDeviceProcAddr gdpa, VkDevice dev, vkattn_present_calls *c, int *swapchain) {
	c->createSwapchain = (PFN_vkCreateSwapchainKHR)gdpa(dev, "vkCreateSwapchainKHR");
	c->destroySwapchain = (PFN_vkDestroySwapchainKHR)gdpa(dev, "vkDestroySwapchainKHR");
	c->getSwapchainImages = (PFN_vkGetSwapchainImagesKHR)gdpa(dev, "vkGetSwapchainImagesKHR");
	c->acquireNextImage = (PFN_vkAcquireNextImageKHR)gdpa(dev, "vkAcquireNextImageKHR");
	c->queuePresent = (PFN_vkQueuePresentKHR)gdpa(dev, "vkQueuePresentKHR");
	*swapchain = c->createSwapchain && c->destroySwapchain && c->getSwapchainImages &&
		c->acquireNextImage && c->queuePresent;
	c->createImage = (PFN_vkCreateImage)gdpa(dev, "vkCreateImage");
	c->destroyImage = (PFN_vkDestroyImage)gdpa(dev, "vkDestroyImage");
	c->imageMemoryRequirements = (PFN_vkGetImageMemoryRequirements)gdpa(dev, "vkGetImageMemoryRequirements");
	c->allocateMemory = (PFN_vkAllocateMemory)gdpa(dev, "vkAllocateMemory");
	c->freeMemory = (PFN_vkFreeMemory)gdpa(dev, "vkFreeMemory");
	c->bindImageMemory = (PFN_vkBindImageMemory)gdpa(dev, "vkBindImageMemory");
	c->createImageView = (PFN_vkCreateImageView)gdpa(dev, "vkCreateImageView");
	c->destroyImageView = (PFN_vkDestroyImageView)gdpa(dev, "vkDestroyImageView");
	c->createSemaphore = (PFN_vkCreateSemaphore)gdpa(dev, "vkCreateSemaphore");
	c->destroySemaphore = (PFN_vkDestroySemaphore)gdpa(dev, "vkDestroySemaphore");
	c->cmdPipelineBarrier = (PFN_vkCmdPipelineBarrier)gdpa(dev, "vkCmdPipelineBarrier");
	c->cmdBlitImage = (PFN_vkCmdBlitImage)gdpa(dev, "vkCmdBlitImage");
	c->cmdCopyImageToBuffer = (PFN_vkCmdCopyImageToBuffer)gdpa(dev, "vkCmdCopyImageToBuffer");
	c->queueSubmit = (PFN_vkQueueSubmit)gdpa(dev, "vkQueueSubmit");
	return c->createImage && c->destroyImage && c->imageMemoryRequirements && c->allocateMemory &&
		c->freeMemory && c->bindImageMemory && c->createImageView && c->destroyImageView &&
		c->createSemaphore && c->destroySemaphore && c->cmdPipelineBarrier && c->cmdBlitImage &&
		c->cmdCopyImageToBuffer && c->queueSubmit ? 0 : -1;
}


static VkResult vkattn_create_image(const vkattn_present_calls *c, VkDevice dev, VkFormat format,
		uint32_t width, uint32_t height, VkImageUsageFlags usage, VkImage *out,
		VkDeviceSize *size, uint32_t *typeBits) {
	VkImageCreateInfo info = {VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO};
	info.imageType = VK_IMAGE_TYPE_2D;
	info.format = format;
	info.extent.width = width;
	info.extent.height = height;
	info.extent.depth = 1;
	info.mipLevels = 1;
	info.arrayLayers = 1;
	info.samples = VK_SAMPLE_COUNT_1_BIT;
	info.tiling = VK_IMAGE_TILING_OPTIMAL;
	info.usage = usage;
	info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
	info.initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
	VkResult r = c->createImage(dev, &info, NULL, out);
	if (r != VK_SUCCESS) return r;
	VkMemoryRequirements req;
	c->imageMemoryRequirements(dev, *out, &req);
	*size = req.size;
	*typeBits = req.memoryTypeBits;
	return VK_SUCCESS;
}

static VkResult vkattn_image_memory(const vkattn_present_calls *c, VkDevice dev, VkImage image,
		VkDeviceSize size, uint32_t type, VkDeviceMemory *out) {
	VkMemoryAllocateInfo info = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
	info.allocationSize = size;
	info.memoryTypeIndex = type;
	VkResult r = c->allocateMemory(dev, &info, NULL, out);
	if (r != VK_SUCCESS) {
		*out = VK_NULL_HANDLE;
		return r;
	}
	return c->bindImageMemory(dev, image, *out, 0);
}

// Every image here is colour, with one mip level and one layer: views and
// barriers cover all of it, blits and copies its one layer.
static VkImageSubresourceRange vkattn_color_range(void) {
	VkImageSubresourceRange r = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
	return r;
}

static VkImageSubresourceLayers vkattn_color_layers(void) {
	VkImageSubresourceLayers l = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
	return l;
}

static VkResult vkattn_create_view(const vkattn_present_calls *c, VkDevice dev, VkImage image,
		VkFormat format, VkImageView *out) {
	VkImageViewCreateInfo info = {VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO};
	info.image = image;
	info.viewType = VK_IMAGE_VIEW_TYPE_2D;
	info.format = format;
	info.subresourceRange = vkattn_color_range();
	return c->createImageView(dev, &info, NULL, out);
}

static void vkattn_destroy_image(const vkattn_present_calls *c, VkDevice dev, VkImage image,
		VkDeviceMemory memory, VkImageView view) {
	if (view != VK_NULL_HANDLE) c->destroyImageView(dev, view, NULL);
	if (image != VK_NULL_HANDLE) c->destroyImage(dev, image, NULL);
	if (memory != VK_NULL_HANDLE) c->freeMemory(dev, memory, NULL);
}

static VkResult vkattn_create_semaphore(const vkattn_present_calls *c, VkDevice dev, VkSemaphore *out) {
	VkSemaphoreCreateInfo info = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
	return c->createSemaphore(dev, &info, NULL, out);
}

static void vkattn_destroy_semaphore(const vkattn_present_calls *c, VkDevice dev, VkSemaphore s) {
	c->destroySemaphore(dev, s, NULL);
}

static void vkattn_image_barrier(const vkattn_present_calls *c, VkCommandBuffer cmd, VkImage image,
		VkImageLayout from, VkImageLayout to, VkPipelineStageFlags srcStages, VkPipelineStageFlags dstStages,
		VkAccessFlags srcAccess, VkAccessFlags dstAccess) {
	VkImageMemoryBarrier b = {VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
	b.srcAccessMask = srcAccess;
	b.dstAccessMask = dstAccess;
	b.oldLayout = from;
	b.newLayout = to;
	b.srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
	b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
	b.image = image;
	b.subresourceRange = vkattn_color_range();
	c->cmdPipelineBarrier(cmd, srcStages, dstStages, 0, 0, NULL, 0, NULL, 1, &b);
}

// The whole of src scaled onto the whole of dst, nearest texel: cells stay
// flat colours however large the window.
static void vkattn_blit(const vkattn_present_calls *c, VkCommandBuffer cmd, VkImage src, int32_t sw, int32_t sh,
		VkImageLayout srcLayout, VkImage dst, int32_t dw, int32_t dh) {
	VkImageBlit region = {0};
	region.srcSubresource = vkattn_color_layers();
	region.srcOffsets[1].x = sw;
	region.srcOffsets[1].y = sh;
	region.srcOffsets[1].z = 1;
	region.dstSubresource = region.srcSubresource;
	region.dstOffsets[1].x = dw;
	region.dstOffsets[1].y = dh;
	region.dstOffsets[1].z = 1;
	c->cmdBlitImage(cmd, src, srcLayout, dst, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &region, VK_FILTER_NEAREST);
}

// The whole image into buf from offset 0, rows packed.
static void vkattn_copy_image(const vkattn_present_calls *c, VkCommandBuffer cmd, VkImage src,
		uint32_t w, uint32_t h, VkBuffer dst) {
	VkBufferImageCopy region = {0};
	region.imageSubresource = vkattn_color_layers();
	region.imageExtent.width = w;
	region.imageExtent.height = h;
	region.imageExtent.depth = 1;
	c->cmdCopyImageToBuffer(cmd, src, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, dst, 1, &region);
}

static VkResult vkattn_submit_sems(const vkattn_present_calls *c, VkQueue queue, VkCommandBuffer cmd,
		VkSemaphore wait, VkPipelineStageFlags waitStage, VkSemaphore signal, VkFence fence) {
	VkSubmitInfo info = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
	if (wait != VK_NULL_HANDLE) {
		info.waitSemaphoreCount = 1;
		info.pWaitSemaphores = &wait;
		info.pWaitDstStageMask = &waitStage;
	}
	info.commandBufferCount = 1;
	info.pCommandBuffers = &cmd;
	if (signal != VK_NULL_HANDLE) {
		info.signalSemaphoreCount = 1;
		info.pSignalSemaphores = &signal;
	}
	return c->queueSubmit(queue, 1, &info, fence);
}
