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
#include "present.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// extra is an object of the presentation path a Device owns (images,
// semaphores, swapchains); the device's Close destroys those left.
type extra interface {
	owner() *Device
	destroy()
}

func (img *Image) owner() *Device   { return img.dev }
func (s *Semaphore) owner() *Device { return s.dev }

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
