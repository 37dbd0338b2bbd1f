package vk

// Presentation: window surfaces, swapchains, storage images, semaphores,
// image barriers and blits, for a viewer that colours a buffer on the
// device and shows it in a window without a copy through the host. Compute
// alone never touches any of it: the extensions it needs are enabled only
// when InstanceConfig.Extensions and DeviceConfig ask for them.
//
// Every call is made from C, like those of calls.go: their create infos
// hold arrays and nested structs (see the package doc).

/*
#include <stdlib.h>
#include <vulkan/vulkan.h>

static PFN_vkVoidFunction vkattn_iproc(void *gipa, VkInstance inst, const char *name) {
	return ((PFN_vkGetInstanceProcAddr)gipa)(inst, name);
}

typedef struct {
	PFN_vkDestroySurfaceKHR destroySurface;
	PFN_vkGetPhysicalDeviceSurfaceSupportKHR surfaceSupport;
	PFN_vkGetPhysicalDeviceSurfaceCapabilitiesKHR surfaceCapabilities;
	PFN_vkGetPhysicalDeviceSurfaceFormatsKHR surfaceFormats;
} vkattn_surface_calls;

// 0 when every entry point was found (VK_KHR_surface is enabled).
static int vkattn_resolve_surface(void *gipa, VkInstance inst, vkattn_surface_calls *c) {
	c->destroySurface = (PFN_vkDestroySurfaceKHR)vkattn_iproc(gipa, inst, "vkDestroySurfaceKHR");
	c->surfaceSupport = (PFN_vkGetPhysicalDeviceSurfaceSupportKHR)vkattn_iproc(gipa, inst, "vkGetPhysicalDeviceSurfaceSupportKHR");
	c->surfaceCapabilities = (PFN_vkGetPhysicalDeviceSurfaceCapabilitiesKHR)vkattn_iproc(gipa, inst, "vkGetPhysicalDeviceSurfaceCapabilitiesKHR");
	c->surfaceFormats = (PFN_vkGetPhysicalDeviceSurfaceFormatsKHR)vkattn_iproc(gipa, inst, "vkGetPhysicalDeviceSurfaceFormatsKHR");
	return c->destroySurface && c->surfaceSupport && c->surfaceCapabilities && c->surfaceFormats ? 0 : -1;
}

static void vkattn_destroy_surface(const vkattn_surface_calls *c, VkInstance inst, VkSurfaceKHR s) {
	c->destroySurface(inst, s, NULL);
}

static VkResult vkattn_surface_support(const vkattn_surface_calls *c, VkPhysicalDevice pd, uint32_t family,
		VkSurfaceKHR s, VkBool32 *out) {
	return c->surfaceSupport(pd, family, s, out);
}

static VkResult vkattn_surface_caps(const vkattn_surface_calls *c, VkPhysicalDevice pd, VkSurfaceKHR s,
		VkSurfaceCapabilitiesKHR *out) {
	return c->surfaceCapabilities(pd, s, out);
}

static VkResult vkattn_surface_formats(const vkattn_surface_calls *c, VkPhysicalDevice pd, VkSurfaceKHR s,
		uint32_t *n, VkSurfaceFormatKHR *out) {
	return c->surfaceFormats(pd, s, n, out);
}

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

static VkResult vkattn_create_swapchain(const vkattn_present_calls *c, VkDevice dev, VkSurfaceKHR surface,
		uint32_t minImages, VkFormat format, VkColorSpaceKHR space, uint32_t width, uint32_t height,
		VkSurfaceTransformFlagBitsKHR transform, VkCompositeAlphaFlagBitsKHR alpha,
		VkSwapchainKHR old, VkSwapchainKHR *out) {
	VkSwapchainCreateInfoKHR info = {VK_STRUCTURE_TYPE_SWAPCHAIN_CREATE_INFO_KHR};
	info.surface = surface;
	info.minImageCount = minImages;
	info.imageFormat = format;
	info.imageColorSpace = space;
	info.imageExtent.width = width;
	info.imageExtent.height = height;
	info.imageArrayLayers = 1;
	info.imageUsage = VK_IMAGE_USAGE_TRANSFER_DST_BIT;
	info.imageSharingMode = VK_SHARING_MODE_EXCLUSIVE;
	info.preTransform = transform;
	info.compositeAlpha = alpha;
	info.presentMode = VK_PRESENT_MODE_FIFO_KHR; // the one mode every driver has
	info.clipped = VK_TRUE;
	info.oldSwapchain = old;
	return c->createSwapchain(dev, &info, NULL, out);
}

static void vkattn_destroy_swapchain(const vkattn_present_calls *c, VkDevice dev, VkSwapchainKHR sc) {
	c->destroySwapchain(dev, sc, NULL);
}

static VkResult vkattn_swapchain_images(const vkattn_present_calls *c, VkDevice dev, VkSwapchainKHR sc,
		uint32_t *n, VkImage *out) {
	return c->getSwapchainImages(dev, sc, n, out);
}

static VkResult vkattn_acquire(const vkattn_present_calls *c, VkDevice dev, VkSwapchainKHR sc,
		uint64_t timeout, VkSemaphore sem, uint32_t *index) {
	return c->acquireNextImage(dev, sc, timeout, sem, VK_NULL_HANDLE, index);
}

static VkResult vkattn_present(const vkattn_present_calls *c, VkQueue queue, VkSwapchainKHR sc,
		uint32_t index, VkSemaphore wait) {
	VkPresentInfoKHR info = {VK_STRUCTURE_TYPE_PRESENT_INFO_KHR};
	if (wait != VK_NULL_HANDLE) {
		info.waitSemaphoreCount = 1;
		info.pWaitSemaphores = &wait;
	}
	info.swapchainCount = 1;
	info.pSwapchains = &sc;
	info.pImageIndices = &index;
	return c->queuePresent(queue, &info);
}

// A 2D image of one mip level and layer in optimal tiling.
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
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// ErrOutOfDate is wrapped by Acquire and Present when the window changed
// (a resize) and the swapchain must be made again.
var ErrOutOfDate = errors.New("vk: swapchain out of date")

// Results of the swapchain extension.
const (
	errorOutOfDate = vulkan.Result(-1000001004) // VK_ERROR_OUT_OF_DATE_KHR
	suboptimal     = vulkan.Result(1000001003)  // VK_SUBOPTIMAL_KHR
)

// SwapchainExtension is the device extension a window needs.
const SwapchainExtension = "VK_KHR_swapchain"

// extra is an object of the presentation path a Device owns (images,
// semaphores, swapchains); the device's Close destroys those left.
type extra interface {
	owner() *Device
	destroy()
}

func (img *Image) owner() *Device   { return img.dev }
func (s *Semaphore) owner() *Device { return s.dev }
func (s *Swapchain) owner() *Device { return s.dev }

// surfaceCalls are the instance-level entry points of VK_KHR_surface. The
// table is an allocation of its own: cgo refuses a pointer into memory
// that also holds Go pointers (err).
type surfaceCalls struct {
	once sync.Once
	c    *C.vkattn_surface_calls
	err  error
}

// surfaceCalls resolves the instance's surface entry points once.
func (in *Instance) surfaceCalls() (*C.vkattn_surface_calls, error) {
	t := &in.surface
	t.once.Do(func() {
		t.c = new(C.vkattn_surface_calls)
		if C.vkattn_resolve_surface(procAddr, C.VkInstance(unsafe.Pointer(in.handle)), t.c) != 0 {
			t.err = errors.New("vk: the instance has no VK_KHR_surface entry points (enable the window's instance extensions)")
		}
	})
	return t.c, t.err
}

// Surface is a window's VkSurfaceKHR, owned by the Instance it was made
// on: Close it (before the instance) or the instance's Close does.
type Surface struct {
	inst   *Instance
	handle vulkan.Surface
}

// NewSurface adopts a surface that create makes for this instance (a
// window toolkit's, such as glfwCreateWindowSurface) from the raw
// VkInstance; the surface then counts among LiveObjects until Close.
func (in *Instance) NewSurface(create func(instance unsafe.Pointer) (surface unsafe.Pointer, err error)) (*Surface, error) {
	if _, err := in.surfaceCalls(); err != nil {
		return nil, err
	}
	h, err := create(unsafe.Pointer(in.handle))
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("vk: the window toolkit returned no surface")
	}
	s := &Surface{inst: in, handle: vulkan.Surface(h)}
	objectCreated()
	own(&in.mu, in.surfaces, s)
	return s, nil
}

// Close destroys the surface; swapchains made on it must be closed first.
func (s *Surface) Close() {
	if s == nil {
		return
	}
	s.inst.mu.Lock()
	defer s.inst.mu.Unlock()
	s.destroyLocked()
}

// destroyLocked destroys the surface; the caller holds inst.mu.
func (s *Surface) destroyLocked() {
	if _, ok := s.inst.surfaces[s]; !ok {
		return
	}
	delete(s.inst.surfaces, s)
	c, err := s.inst.surfaceCalls()
	if err == nil {
		C.vkattn_destroy_surface(c, C.VkInstance(unsafe.Pointer(s.inst.handle)), C.VkSurfaceKHR(unsafe.Pointer(s.handle)))
	}
	objectDestroyed()
}

// presentFamily picks a queue family of pd that computes and presents to
// s, preferring the one compute already chose.
func (in *Instance) presentFamily(pd PhysicalDevice, s *Surface) (family uint32, timestamps bool, err error) {
	c, err := in.surfaceCalls()
	if err != nil {
		return 0, false, err
	}
	fams, err := queueFamilies(in.handle, pd.handle)
	if err != nil {
		return 0, false, err
	}
	found := -1
	for i, f := range fams {
		if f.flags&vulkan.QueueComputeBit == 0 {
			continue
		}
		var ok C.VkBool32
		if err := check("vkGetPhysicalDeviceSurfaceSupportKHR", result(C.vkattn_surface_support(c,
			C.VkPhysicalDevice(unsafe.Pointer(pd.handle)), C.uint32_t(i), C.VkSurfaceKHR(unsafe.Pointer(s.handle)), &ok))); err != nil {
			return 0, false, err
		}
		if ok == 0 {
			continue
		}
		if found < 0 || uint32(i) == pd.queueFamily {
			found = i
		}
	}
	if found < 0 {
		return 0, false, fmt.Errorf("vk: no queue family of %s both computes and presents to the window", pd.Name)
	}
	f := fams[found]
	return uint32(found), f.timestampBits > 0 && pd.Limits.TimestampPeriod > 0, nil
}

// presentCalls are the device-level entry points of this file (the table
// allocated alone, as surfaceCalls's).
type presentCalls struct {
	once      sync.Once
	c         *C.vkattn_present_calls
	swapchain bool
	err       error
}

// presentCalls resolves the device's entry points once.
func (d *Device) presentCalls() (*C.vkattn_present_calls, error) {
	p := d.present
	p.once.Do(func() {
		var sc C.int
		p.c = new(C.vkattn_present_calls)
		if C.vkattn_resolve_present(d.calls.gdpa, d.cDevice(), p.c, &sc) != 0 {
			p.err = errors.New("vk: vkGetDeviceProcAddr: a core Vulkan 1.0 image command is missing")
		}
		p.swapchain = sc != 0
	})
	return p.c, p.err
}

// track adds an object to the device's owner list; untrack removes it and
// reports whether it was there (so each object is destroyed once).
func (d *Device) track(o extra) { own(&d.mu, d.extras, o) }

func (d *Device) untrack(o extra) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.extras[o]; !ok {
		return false
	}
	delete(d.extras, o)
	return true
}

// closeExtra is the Close of a tracked object: nil does nothing, and o is
// destroyed once, not at all after the device's Close (which destroyed it).
func closeExtra[E interface {
	comparable
	extra
}](o E) {
	var none E
	if o == none {
		return
	}
	d := o.owner()
	if d.enter() != nil {
		return
	}
	defer d.exit()
	if d.untrack(o) {
		o.destroy()
	}
}

// enterPresent enters the device (the caller exits) and returns its
// presentation entry points; on an error it has not entered.
func (d *Device) enterPresent() (*C.vkattn_present_calls, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	c, err := d.presentCalls()
	if err != nil {
		d.exit()
		return nil, err
	}
	return c, nil
}

// Image is a 2D colour image: a storage image the device owns
// (NewStorageImage), or one of a swapchain's.
type Image struct {
	dev           *Device
	handle        vulkan.Image
	memory        vulkan.DeviceMemory
	view          vulkan.ImageView
	format        C.VkFormat
	Width, Height uint32
	swapchain     bool // owned by its swapchain, not destroyed alone
}

// StorageImageFormat is the format of storage images: 8-bit RGBA, unsigned
// normalized (GLSL rgba8), which blits convert to the window's format.
const StorageImageFormat = 37 // VK_FORMAT_R8G8B8A8_UNORM

// NewStorageImage makes a width x height RGBA8 image that compute shaders
// write (binding type StorageImage, in LayoutGeneral) and blits and copies
// read (in LayoutTransferSrc).
func (d *Device) NewStorageImage(width, height uint32) (*Image, error) {
	if width == 0 || height == 0 {
		return nil, fmt.Errorf("vk: storage image of %d x %d pixels", width, height)
	}
	c, err := d.enterPresent()
	if err != nil {
		return nil, err
	}
	defer d.exit()
	want := vulkan.FormatFeatureStorageImageBit | vulkan.FormatFeatureBlitSrcBit
	if got := d.optimalFeatures(StorageImageFormat); got&want != want {
		return nil, fmt.Errorf("vk: %s cannot use R8G8B8A8_UNORM as a storage image and blit source", d.Info.Name)
	}
	img := &Image{dev: d, format: StorageImageFormat, Width: width, Height: height}
	var h C.VkImage
	var size C.VkDeviceSize
	var bits C.uint32_t
	usage := C.VkImageUsageFlags(C.VK_IMAGE_USAGE_STORAGE_BIT | C.VK_IMAGE_USAGE_TRANSFER_SRC_BIT)
	if err := check("vkCreateImage", result(C.vkattn_create_image(c, d.cDevice(), StorageImageFormat,
		C.uint32_t(width), C.uint32_t(height), usage, &h, &size, &bits))); err != nil {
		return nil, err
	}
	img.handle = vulkan.Image(unsafe.Pointer(h))
	objectCreated()
	typeIndex, ok := d.findMemoryType(uint32(bits), vulkan.MemoryPropertyDeviceLocalBit, 0)
	if !ok {
		img.destroy()
		return nil, fmt.Errorf("vk: no device-local memory type for a %d x %d image", width, height)
	}
	var mem C.VkDeviceMemory
	err = check("vkAllocateMemory/vkBindImageMemory", result(C.vkattn_image_memory(c, d.cDevice(), h, size, C.uint32_t(typeIndex), &mem)))
	if mem != nil {
		img.memory = vulkan.DeviceMemory(unsafe.Pointer(mem))
		objectCreated()
	}
	if err != nil {
		img.destroy()
		return nil, err
	}
	var view C.VkImageView
	if err := check("vkCreateImageView", result(C.vkattn_create_view(c, d.cDevice(), h, StorageImageFormat, &view))); err != nil {
		img.destroy()
		return nil, err
	}
	img.view = vulkan.ImageView(unsafe.Pointer(view))
	objectCreated()
	d.track(img)
	return img, nil
}

// optimalFeatures is what the device can do with images of format in
// optimal tiling.
func (d *Device) optimalFeatures(format C.VkFormat) vulkan.FormatFeatureFlagBits {
	var fp vulkan.FormatProperties
	vulkan.GetPhysicalDeviceFormatProperties(d.Info.handle, vulkan.Format(format), &fp)
	fp.Deref()
	fp.Free() // vulkan-go's C copy; the values are in the Go fields
	return vulkan.FormatFeatureFlagBits(fp.OptimalTilingFeatures)
}

// Close destroys the image; work using it must have finished. Swapchain
// images go with their swapchain.
func (img *Image) Close() {
	if img == nil || img.swapchain {
		return
	}
	closeExtra(img)
}

func (img *Image) destroy() {
	c, err := img.dev.presentCalls()
	if err != nil {
		return
	}
	C.vkattn_destroy_image(c, img.dev.cDevice(), C.VkImage(unsafe.Pointer(img.handle)),
		C.VkDeviceMemory(unsafe.Pointer(img.memory)), C.VkImageView(unsafe.Pointer(img.view)))
	for _, h := range []unsafe.Pointer{unsafe.Pointer(img.handle), unsafe.Pointer(img.memory), unsafe.Pointer(img.view)} {
		if h != nil {
			objectDestroyed()
		}
	}
	img.handle, img.memory, img.view = nil, nil, nil
}

// Semaphore orders work on the device: an acquired swapchain image before
// the commands that draw it, those commands before the present.
type Semaphore struct {
	dev    *Device
	handle vulkan.Semaphore
}

// NewSemaphore makes a binary semaphore.
func (d *Device) NewSemaphore() (*Semaphore, error) {
	c, err := d.enterPresent()
	if err != nil {
		return nil, err
	}
	defer d.exit()
	var h C.VkSemaphore
	if err := check("vkCreateSemaphore", result(C.vkattn_create_semaphore(c, d.cDevice(), &h))); err != nil {
		return nil, err
	}
	s := &Semaphore{dev: d, handle: vulkan.Semaphore(unsafe.Pointer(h))}
	objectCreated()
	d.track(s)
	return s, nil
}

// Close destroys the semaphore; no pending work may wait on it.
func (s *Semaphore) Close() { closeExtra(s) }

func (s *Semaphore) destroy() {
	if c, err := s.dev.presentCalls(); err == nil {
		destroyOnce(&s.handle, func(h vulkan.Semaphore) {
			C.vkattn_destroy_semaphore(c, s.dev.cDevice(), C.VkSemaphore(unsafe.Pointer(h)))
		})
	}
}

func (s *Semaphore) c() C.VkSemaphore {
	if s == nil {
		return nil
	}
	return C.VkSemaphore(unsafe.Pointer(s.handle))
}

// Swapchain is the images a window shows in turn.
type Swapchain struct {
	dev     *Device
	surface *Surface
	handle  vulkan.Swapchain
	Images  []*Image
	Width   uint32
	Height  uint32
	Format  string // the image format's name, e.g. B8G8R8A8_UNORM
}

// unormFormats are the window formats a blit of 8-bit RGBA stores exactly,
// by preference. An sRGB format would re-encode the colours, so pictures
// would not match the palette.
var unormFormats = []struct {
	format C.VkFormat
	name   string
}{
	{C.VK_FORMAT_B8G8R8A8_UNORM, "B8G8R8A8_UNORM"},
	{C.VK_FORMAT_R8G8B8A8_UNORM, "R8G8B8A8_UNORM"},
	{C.VK_FORMAT_A8B8G8R8_UNORM_PACK32, "A8B8G8R8_UNORM_PACK32"},
}

// NewSwapchain makes a swapchain for surface of the surface's current size
// (or width x height where the window lets the swapchain choose), with an
// 8-bit UNORM format and images that blits write. old, if not nil, is the
// swapchain being replaced (after a resize); close it after this returns.
func (d *Device) NewSwapchain(s *Surface, width, height uint32, old *Swapchain) (*Swapchain, error) {
	c, err := d.enterPresent()
	if err != nil {
		return nil, err
	}
	defer d.exit()
	if !d.present.swapchain {
		return nil, fmt.Errorf("vk: device %s was made without %s (DeviceConfig.Extensions)", d, SwapchainExtension)
	}
	sc, err := s.inst.surfaceCalls()
	if err != nil {
		return nil, err
	}
	pd := C.VkPhysicalDevice(unsafe.Pointer(d.Info.handle))
	cs := C.VkSurfaceKHR(unsafe.Pointer(s.handle))
	var caps C.VkSurfaceCapabilitiesKHR
	if err := check("vkGetPhysicalDeviceSurfaceCapabilitiesKHR", result(C.vkattn_surface_caps(sc, pd, cs, &caps))); err != nil {
		return nil, err
	}
	if caps.supportedUsageFlags&C.VK_IMAGE_USAGE_TRANSFER_DST_BIT == 0 {
		return nil, fmt.Errorf("vk: the window's images cannot be transfer destinations on %s", d.Info.Name)
	}
	w, h := uint32(caps.currentExtent.width), uint32(caps.currentExtent.height)
	if w == 0xFFFFFFFF { // the swapchain sets the size
		w = min(max(width, uint32(caps.minImageExtent.width)), uint32(caps.maxImageExtent.width))
		h = min(max(height, uint32(caps.minImageExtent.height)), uint32(caps.maxImageExtent.height))
	}
	if w == 0 || h == 0 {
		return nil, fmt.Errorf("%w: the window has no area (minimized)", ErrOutOfDate)
	}
	var n C.uint32_t
	if err := check("vkGetPhysicalDeviceSurfaceFormatsKHR", result(C.vkattn_surface_formats(sc, pd, cs, &n, nil))); err != nil {
		return nil, err
	}
	formats := make([]C.VkSurfaceFormatKHR, max(n, 1))
	if err := check("vkGetPhysicalDeviceSurfaceFormatsKHR", result(C.vkattn_surface_formats(sc, pd, cs, &n, &formats[0]))); err != nil {
		return nil, err
	}
	formats = formats[:n]
	chosen := -1
	var name string
	for _, u := range unormFormats {
		for i, f := range formats {
			if f.format == u.format && chosen < 0 {
				chosen, name = i, u.name
			}
		}
	}
	if chosen < 0 {
		var have []string
		for _, f := range formats {
			have = append(have, fmt.Sprint(int(f.format)))
		}
		return nil, fmt.Errorf("vk: the window offers no 8-bit UNORM format (VkFormat %s)", strings.Join(have, ", "))
	}
	f := formats[chosen]
	if d.optimalFeatures(f.format)&vulkan.FormatFeatureBlitDstBit == 0 {
		return nil, fmt.Errorf("vk: %s cannot blit into %s images", d.Info.Name, name)
	}
	images := caps.minImageCount + 1
	if caps.maxImageCount > 0 && images > caps.maxImageCount {
		images = caps.maxImageCount
	}
	alpha := C.VkCompositeAlphaFlagBitsKHR(C.VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR)
	if caps.supportedCompositeAlpha&C.VkCompositeAlphaFlagsKHR(alpha) == 0 {
		for bit := C.VkCompositeAlphaFlagsKHR(1); bit <= 8; bit <<= 1 {
			if caps.supportedCompositeAlpha&bit != 0 {
				alpha = C.VkCompositeAlphaFlagBitsKHR(bit)
				break
			}
		}
	}
	var oldHandle C.VkSwapchainKHR
	if old != nil {
		oldHandle = C.VkSwapchainKHR(unsafe.Pointer(old.handle))
	}
	var hs C.VkSwapchainKHR
	err = check("vkCreateSwapchainKHR", result(C.vkattn_create_swapchain(c, d.cDevice(), cs, images, f.format, f.colorSpace,
		C.uint32_t(w), C.uint32_t(h), caps.currentTransform, alpha, oldHandle, &hs)))
	if err != nil {
		return nil, err
	}
	swap := &Swapchain{dev: d, surface: s, handle: vulkan.Swapchain(unsafe.Pointer(hs)), Width: w, Height: h, Format: name}
	objectCreated()
	var count C.uint32_t
	if err := check("vkGetSwapchainImagesKHR", result(C.vkattn_swapchain_images(c, d.cDevice(), hs, &count, nil))); err != nil {
		swap.destroy()
		return nil, err
	}
	handles := make([]C.VkImage, max(count, 1))
	if err := check("vkGetSwapchainImagesKHR", result(C.vkattn_swapchain_images(c, d.cDevice(), hs, &count, &handles[0]))); err != nil {
		swap.destroy()
		return nil, err
	}
	for _, ih := range handles[:count] {
		swap.Images = append(swap.Images, &Image{dev: d, handle: vulkan.Image(unsafe.Pointer(ih)), format: f.format,
			Width: w, Height: h, swapchain: true})
	}
	d.track(swap)
	return swap, nil
}

// acquireTimeout bounds the wait for a window image; the display server
// returns one within a frame or two unless it is gone.
const acquireTimeout = 10 * time.Second

// Acquire returns the index of the next image to draw; signal is signalled
// when the image may be written. ErrOutOfDate means: make a new swapchain.
func (s *Swapchain) Acquire(signal *Semaphore) (index uint32, err error) {
	d := s.dev
	c, err := d.enterPresent()
	if err != nil {
		return 0, err
	}
	defer d.exit()
	var i C.uint32_t
	r := result(C.vkattn_acquire(c, d.cDevice(), C.VkSwapchainKHR(unsafe.Pointer(s.handle)),
		C.uint64_t(acquireTimeout.Nanoseconds()), signal.c(), &i))
	switch r {
	case vulkan.Success, suboptimal: // suboptimal still presents; the resize event follows
		return uint32(i), nil
	case errorOutOfDate:
		return 0, fmt.Errorf("%w: vkAcquireNextImageKHR", ErrOutOfDate)
	}
	return 0, check("vkAcquireNextImageKHR", r)
}

// Present queues image index for display once wait is signalled.
func (s *Swapchain) Present(index uint32, wait *Semaphore) error {
	d := s.dev
	c, err := d.enterPresent()
	if err != nil {
		return err
	}
	defer d.exit()
	d.mu.Lock() // the queue is externally synchronized
	r := result(C.vkattn_present(c, C.VkQueue(unsafe.Pointer(d.queue)), C.VkSwapchainKHR(unsafe.Pointer(s.handle)),
		C.uint32_t(index), wait.c()))
	d.mu.Unlock()
	switch r {
	case vulkan.Success, suboptimal:
		return nil
	case errorOutOfDate:
		return fmt.Errorf("%w: vkQueuePresentKHR", ErrOutOfDate)
	}
	return check("vkQueuePresentKHR", r)
}

// Close destroys the swapchain (and its images); nothing may still use
// them (WaitIdle first).
func (s *Swapchain) Close() { closeExtra(s) }

func (s *Swapchain) destroy() {
	if c, err := s.dev.presentCalls(); err == nil {
		destroyOnce(&s.handle, func(h vulkan.Swapchain) {
			C.vkattn_destroy_swapchain(c, s.dev.cDevice(), C.VkSwapchainKHR(unsafe.Pointer(h)))
		})
		s.Images = nil
	}
}

// ImageLayout is the layout an image is in, as far as the commands that
// use it are concerned.
type ImageLayout int

const (
	LayoutUndefined   ImageLayout = iota // contents may be discarded
	LayoutGeneral                        // storage image: compute writes
	LayoutTransferSrc                    // a blit's or copy's source
	LayoutTransferDst                    // a blit's destination
	LayoutPresent                        // handed to the window
)

// layoutSync is what each layout means for a barrier: the Vulkan layout
// and the stages and accesses before (as a source) and after (as a
// destination) the transition.
func layoutSync(l ImageLayout) (layout C.VkImageLayout, stages C.VkPipelineStageFlags, srcAccess, dstAccess C.VkAccessFlags) {
	switch l {
	case LayoutGeneral:
		return C.VK_IMAGE_LAYOUT_GENERAL, C.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
			C.VK_ACCESS_SHADER_WRITE_BIT, C.VK_ACCESS_SHADER_READ_BIT | C.VK_ACCESS_SHADER_WRITE_BIT
	case LayoutTransferSrc:
		return C.VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, C.VK_PIPELINE_STAGE_TRANSFER_BIT,
			0, C.VK_ACCESS_TRANSFER_READ_BIT
	case LayoutTransferDst:
		return C.VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, C.VK_PIPELINE_STAGE_TRANSFER_BIT,
			C.VK_ACCESS_TRANSFER_WRITE_BIT, C.VK_ACCESS_TRANSFER_WRITE_BIT
	case LayoutPresent:
		return C.VK_IMAGE_LAYOUT_PRESENT_SRC_KHR, C.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, 0, 0
	}
	// Undefined: nothing to wait for but the stages a semaphore wait for
	// an acquired image covers (transfer), so the dependency chains on it.
	return C.VK_IMAGE_LAYOUT_UNDEFINED, C.VK_PIPELINE_STAGE_TRANSFER_BIT | C.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 0
}

// Transition records a barrier moving img from one layout to another, with
// the writes before it visible to the uses after it. A failure is returned
// by End.
func (c *Commands) Transition(img *Image, from, to ImageLayout) {
	c.recordImages(func(pc *C.vkattn_present_calls, cmd C.VkCommandBuffer) error {
		oldL, srcStages, srcAccess, _ := layoutSync(from)
		newL, dstStages, _, dstAccess := layoutSync(to)
		if to == LayoutPresent {
			dstStages = C.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
		}
		C.vkattn_image_barrier(pc, cmd, C.VkImage(unsafe.Pointer(img.handle)),
			oldL, newL, srcStages, dstStages, srcAccess, dstAccess)
		return nil
	}, img)
}

// recordImages records rec with the presentation entry points, once every
// image in imgs is known to be open; a failure is returned by End.
func (c *Commands) recordImages(rec func(pc *C.vkattn_present_calls, cmd C.VkCommandBuffer) error, imgs ...*Image) {
	c.recording(func() error {
		pc, err := c.dev.presentCalls()
		if err != nil {
			return err
		}
		for _, img := range imgs {
			if img.handle == nil {
				return fmt.Errorf("%w: image", ErrClosed)
			}
		}
		return rec(pc, C.VkCommandBuffer(unsafe.Pointer(c.cmd)))
	})
}

// Blit records a copy of the whole of src (LayoutTransferSrc) scaled onto the
// whole of dst (LayoutTransferDst), nearest texel, converting the format.
// A failure is returned by End.
func (c *Commands) Blit(src, dst *Image) {
	c.recordImages(func(pc *C.vkattn_present_calls, cmd C.VkCommandBuffer) error {
		C.vkattn_blit(pc, cmd,
			C.VkImage(unsafe.Pointer(src.handle)), C.int32_t(src.Width), C.int32_t(src.Height), C.VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL,
			C.VkImage(unsafe.Pointer(dst.handle)), C.int32_t(dst.Width), C.int32_t(dst.Height))
		return nil
	}, src, dst)
}

// CopyImage records a copy of a storage image (LayoutTransferSrc) into dst
// from offset 0, 4 bytes a pixel, rows packed: for reading a picture back
// in tests. A failure is returned by End.
func (c *Commands) CopyImage(src *Image, dst *Buffer) {
	c.recordImages(func(pc *C.vkattn_present_calls, cmd C.VkCommandBuffer) error {
		if need := 4 * uint64(src.Width) * uint64(src.Height); dst.size < need {
			return fmt.Errorf("vk: copying a %d x %d image needs %d bytes, the buffer has %d", src.Width, src.Height, need, dst.size)
		}
		c.uses[dst] = struct{}{}
		C.vkattn_copy_image(pc, cmd, C.VkImage(unsafe.Pointer(src.handle)),
			C.uint32_t(src.Width), C.uint32_t(src.Height), C.VkBuffer(unsafe.Pointer(dst.handle)))
		return nil
	}, src)
}

// SubmitSignal is Submit for a frame: the commands wait (at the transfer
// stage) for wait, an acquired image, and signal signal when done, for
// Present. Either may be nil. Wait as after Submit.
func (c *Commands) SubmitSignal(wait, signal *Semaphore) error {
	return c.submitWith(wait, signal)
}

// submitSems is vkQueueSubmit with semaphores; the caller holds d.mu.
func (d *Device) submitSems(cmd vulkan.CommandBuffer, fence vulkan.Fence, wait, signal *Semaphore) error {
	pc, err := d.presentCalls()
	if err != nil {
		return err
	}
	return check("vkQueueSubmit", result(C.vkattn_submit_sems(pc, C.VkQueue(unsafe.Pointer(d.queue)),
		C.VkCommandBuffer(unsafe.Pointer(cmd)), wait.c(), C.VK_PIPELINE_STAGE_TRANSFER_BIT, signal.c(),
		C.VkFence(unsafe.Pointer(fence)))))
}
