//go:build viewer

package vk

// Windows: surfaces and swapchains, in the viewer build only (the
// headless painter and compute use present.go alone; surface_headless.go
// stands in for them elsewhere).

/*
#include "present.h"

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
