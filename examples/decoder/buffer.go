package main

import (
	"fmt"
	"math"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// Buffer is a VkBuffer in host-visible, coherent memory of its own,
// mapped for the buffer's life: the host reads and writes it in place,
// and a write before a submission needs no flush. (A discrete GPU's
// host-visible memory is slower for the kernels than its device-local
// memory; a model that big would upload its weights through a staging
// buffer instead.)
type Buffer struct {
	Handle vulkan.Buffer
	Size   uint64                  // bytes, as created
	Usage  vulkan.BufferUsageFlags // as created
	memory vulkan.DeviceMemory
	mapped unsafe.Pointer
}

// StorageUsage is what the host's kernels need of a buffer.
const StorageUsage = vulkan.BufferUsageFlags(vulkan.BufferUsageStorageBufferBit)

// NewBuffer makes a buffer of size bytes (rounded up to a multiple of 16)
// with usage, bound to memory of its own, zeroed and mapped.
func (h *Host) NewBuffer(size uint64, usage vulkan.BufferUsageFlags) (*Buffer, error) {
	if size == 0 {
		return nil, fmt.Errorf("NewBuffer: size 0")
	}
	size = (size + 15) &^ 15
	info := &vulkan.BufferCreateInfo{SType: vulkan.StructureTypeBufferCreateInfo,
		Size: vulkan.DeviceSize(size), Usage: usage, SharingMode: vulkan.SharingModeExclusive}
	var buf vulkan.Buffer
	err := check("vkCreateBuffer", vulkan.CreateBuffer(h.Device, info, nil, &buf))
	info.Free()
	if err != nil {
		return nil, err
	}
	b := &Buffer{Handle: buf, Size: size, Usage: usage}
	var req vulkan.MemoryRequirements
	vulkan.GetBufferMemoryRequirements(h.Device, buf, &req)
	req.Deref()
	typ, err := h.hostMemoryType(req.MemoryTypeBits)
	if err != nil {
		b.destroy(h.Device)
		return nil, err
	}
	ainfo := &vulkan.MemoryAllocateInfo{SType: vulkan.StructureTypeMemoryAllocateInfo,
		AllocationSize: req.Size, MemoryTypeIndex: typ}
	var mem vulkan.DeviceMemory
	err = check("vkAllocateMemory", vulkan.AllocateMemory(h.Device, ainfo, nil, &mem))
	ainfo.Free()
	if err != nil {
		b.destroy(h.Device)
		return nil, err
	}
	b.memory = mem
	if err := check("vkBindBufferMemory", vulkan.BindBufferMemory(h.Device, buf, mem, 0)); err != nil {
		b.destroy(h.Device)
		return nil, err
	}
	var p unsafe.Pointer
	if err := check("vkMapMemory", vulkan.MapMemory(h.Device, mem, 0, vulkan.DeviceSize(size), 0, &p)); err != nil {
		b.destroy(h.Device)
		return nil, err
	}
	b.mapped = p
	clear(b.bytes())
	h.buffers = append(h.buffers, b)
	return b, nil
}

// hostMemoryType picks, among the types bits allows, one that is host
// visible and coherent, preferring one that is device-local too (a CPU
// device's or unified memory's only type is all three).
func (h *Host) hostMemoryType(bits uint32) (uint32, error) {
	want := vulkan.MemoryPropertyFlags(vulkan.MemoryPropertyHostVisibleBit | vulkan.MemoryPropertyHostCoherentBit)
	local := vulkan.MemoryPropertyFlags(vulkan.MemoryPropertyDeviceLocalBit)
	found, best := false, uint32(0)
	for i := uint32(0); i < h.memory.MemoryTypeCount; i++ {
		flags := h.memory.MemoryTypes[i].PropertyFlags
		if bits&(1<<i) == 0 || flags&want != want {
			continue
		}
		if flags&local != 0 {
			return i, nil
		}
		if !found {
			found, best = true, i
		}
	}
	if !found {
		return 0, fmt.Errorf("%s has no host-visible, coherent memory for a buffer (memory type bits %#x)", h.Name, bits)
	}
	return best, nil
}

func (b *Buffer) bytes() []byte { return unsafe.Slice((*byte)(b.mapped), b.Size) }

// Floats is the buffer's memory as float32s, in place: writes reach the
// device at the next submission, and what a finished submission wrote is
// there to read.
func (b *Buffer) Floats() []float32 { return unsafe.Slice((*float32)(b.mapped), b.Size/4) }

// Uints is the buffer's memory as uint32s, in place.
func (b *Buffer) Uints() []uint32 { return unsafe.Slice((*uint32)(b.mapped), b.Size/4) }

// Write copies xs to the buffer's start; it must fit.
func (b *Buffer) Write(xs []float32) error {
	if uint64(len(xs))*4 > b.Size {
		return fmt.Errorf("write of %d floats to a buffer of %d bytes", len(xs), b.Size)
	}
	copy(b.Floats(), xs)
	return nil
}

// MaxAbs is the largest |x| of the buffer's first n floats, NaN if any is
// NaN.
func (b *Buffer) MaxAbs(n int) float64 {
	m := 0.0
	for _, x := range b.Floats()[:n] {
		a := math.Abs(float64(x))
		if math.IsNaN(a) {
			return a
		}
		m = max(m, a)
	}
	return m
}

// destroy unmaps and frees the memory and destroys the buffer.
func (b *Buffer) destroy(dev vulkan.Device) {
	if b.mapped != nil {
		vulkan.UnmapMemory(dev, b.memory)
		b.mapped = nil
	}
	if b.Handle != nil {
		vulkan.DestroyBuffer(dev, b.Handle, nil)
		b.Handle = nil
	}
	if b.memory != nil {
		vulkan.FreeMemory(dev, b.memory, nil)
		b.memory = nil
	}
}
