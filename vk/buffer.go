package vk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/vkattn/vkattn/core"
	vulkan "github.com/vulkan-go/vulkan"
)

// Buffer is device memory usable as a storage, uniform or texel buffer.
// In host-visible device-local memory (lavapipe, integrated GPUs, small
// buffers in a discrete GPU's BAR window) it stays mapped and reads and
// writes are memcpy; elsewhere they go through the device's staging area.
//
// Close may come while submitted work still uses the buffer (a cancelled
// wait): the buffer is then freed when that work is seen to finish.
type Buffer struct {
	dev    *Device
	handle vulkan.Buffer
	memory vulkan.DeviceMemory
	size   uint64
	heap   uint32 // the memory heap its memory came from
	bytes  uint64 // of memory allocated on it
	use    bufferUse
	// id names the VkBuffer for its whole life, spare times included
	// (handle values may be reused by the driver once destroyed).
	id     uint64
	mapped unsafe.Pointer
	// borrowed: the VkBuffer and its memory are another owner's
	// (BorrowBuffer); only views made of it here are freed.
	borrowed bool
	// Guarded by dev.mu:
	views   map[viewKey]vulkan.BufferView
	closing bool // Close was called
	users   int  // host accesses and submissions in flight that use it
}

const allBufferUsage = vulkan.BufferUsageStorageBufferBit | vulkan.BufferUsageUniformBufferBit |
	vulkan.BufferUsageUniformTexelBufferBit | vulkan.BufferUsageTransferSrcBit | vulkan.BufferUsageTransferDstBit

// NewBuffer allocates size bytes of device memory (rounded up to 16).
func (d *Device) NewBuffer(size uint64) (*Buffer, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	return d.newBuffer(size, deviceData)
}

// bufferIDs numbers the VkBuffers made in this process.
var bufferIDs atomic.Uint64

// NewHostBuffer allocates size bytes of host-visible memory that the host
// reads and writes directly, in system memory where the device has it: a
// staging buffer of the caller's own, whose transfers to and from device
// buffers (Commands.Copy) go into the caller's submissions.
func (d *Device) NewHostBuffer(size uint64) (*Buffer, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	b, err := d.newBuffer(size, stagingData)
	if err == nil && b.mapped == nil {
		b.Close()
		return nil, fmt.Errorf("vk: no host-visible memory for a %d-byte staging buffer", size)
	}
	return b, err
}

// vkBufferSize is the size of the VkBuffer made for size bytes (a multiple
// of 16): size, or past a power of two by 16 bytes (32 for the smallest)
// where that stays within limit (the largest allocation; 0: none).
// llvmpipe (lavapipe) keys each compiled kernel on whether the size of
// every buffer bound as a texel buffer is a power of two, so a kernel run on buffers of 16,384 and then 15,360 bytes
// compiled twice (2.5 s each at d=64); with no VkBuffer's size a power of
// two it compiles once for both.
func vkBufferSize(size, limit uint64) uint64 {
	padded := size
	for padded&(padded-1) == 0 {
		padded += 16
	}
	if limit > 0 && padded > limit {
		return size
	}
	return padded
}

func (d *Device) newBuffer(size uint64, use bufferUse) (*Buffer, error) {
	if size == 0 {
		size = 16
	}
	size = (size + 15) &^ 15
	if max := d.Info.Limits.MaxMemoryAllocation; max > 0 && size > max {
		return nil, fmt.Errorf("%w: a buffer of %d bytes exceeds the largest memory heap (%d bytes)", ErrOutOfMemory, size, max)
	}
	d.mu.Lock()
	if b := d.reviveBufferLocked(size, use); b != nil {
		d.buffers[b] = struct{}{}
		d.countLiveLocked(size)
		d.mu.Unlock()
		return b, nil
	}
	d.mu.Unlock()
	var handle vulkan.Buffer
	info := vulkan.BufferCreateInfo{
		SType:       vulkan.StructureTypeBufferCreateInfo,
		Size:        vulkan.DeviceSize(vkBufferSize(size, d.Info.Limits.MaxMemoryAllocation)),
		Usage:       vulkan.BufferUsageFlags(allBufferUsage),
		SharingMode: vulkan.SharingModeExclusive,
	}
	defer info.Free() // vulkan-go keeps the C copy of a struct until Free
	err := d.call("vkCreateBuffer", func() vulkan.Result { return vulkan.CreateBuffer(d.handle, &info, nil, &handle) })
	if err != nil {
		return nil, err
	}
	objectCreated()
	b := &Buffer{dev: d, handle: handle, size: size, use: use, id: bufferIDs.Add(1)}
	var req vulkan.MemoryRequirements
	vulkan.GetBufferMemoryRequirements(d.handle, handle, &req)
	req.Deref()
	req.Free()
	hostBits := vulkan.MemoryPropertyHostVisibleBit | vulkan.MemoryPropertyHostCoherentBit
	types := d.memoryTypesFor(req.MemoryTypeBits, size, use)
	if len(types) == 0 {
		b.destroyHandle()
		return nil, fmt.Errorf("vk: no suitable memory type for a %d-byte buffer", size)
	}
	if err := d.allocationRoom(); err != nil {
		b.destroyHandle()
		return nil, err
	}
	types, full := d.withHeapRoom(types, uint64(req.Size))
	if len(types) == 0 {
		d.mu.Lock()
		dropped := d.dropSpareBuffersLocked()
		d.mu.Unlock()
		if dropped {
			types, full = d.withHeapRoom(d.memoryTypesFor(req.MemoryTypeBits, size, use), uint64(req.Size))
		}
	}
	if len(types) == 0 {
		b.destroyHandle()
		return nil, full
	}
	var mem vulkan.DeviceMemory
	var typeIndex uint32
	for _, typeIndex = range types {
		alloc := vulkan.MemoryAllocateInfo{
			SType:           vulkan.StructureTypeMemoryAllocateInfo,
			AllocationSize:  req.Size,
			MemoryTypeIndex: typeIndex,
		}
		err = d.call("vkAllocateMemory", func() vulkan.Result { return allocateMemory(d.handle, &alloc, &mem) })
		alloc.Free()
		if !outOfMemory(err) {
			break // allocated, or failed for another reason than a full heap
		}
	}
	if outOfMemory(err) {
		b.destroyHandle()
		h := d.memTypes.MemoryTypes[typeIndex].HeapIndex
		return nil, fmt.Errorf("%w: %d bytes on heap %d (%d of its %d bytes in use by this device): %w",
			ErrOutOfMemory, req.Size, h, d.heapUse(h), d.heapSize(h), err)
	}
	if err != nil {
		b.destroyHandle()
		return nil, err
	}
	b.memory = mem
	b.heap, b.bytes = d.memTypes.MemoryTypes[typeIndex].HeapIndex, uint64(req.Size)
	objectCreated()
	if err := d.call("vkBindBufferMemory", func() vulkan.Result { return vulkan.BindBufferMemory(d.handle, handle, mem, 0) }); err != nil {
		b.destroy()
		return nil, err
	}
	flags := vulkan.MemoryPropertyFlagBits(d.memTypes.MemoryTypes[typeIndex].PropertyFlags)
	if flags&hostBits == hostBits && (mapDeviceData && !d.discreteModel() || use == stagingData) {
		var p unsafe.Pointer
		if err := d.call("vkMapMemory", func() vulkan.Result { return vulkan.MapMemory(d.handle, mem, 0, vulkan.DeviceSize(size), 0, &p) }); err != nil {
			b.destroy()
			return nil, err
		}
		b.mapped = p
	}
	d.mu.Lock()
	d.buffers[b] = struct{}{}
	d.allocLog.heapLive[b.heap] += b.bytes
	d.allocLog.count++
	d.countLiveLocked(size)
	d.mu.Unlock()
	return b, nil
}

// countLiveLocked counts a buffer of size bytes as live.
func (d *Device) countLiveLocked(size uint64) {
	a := &d.allocLog
	a.live += size
	a.peak = max(a.peak, a.live)
	a.largest = max(a.largest, size)
}

// Mapped reports whether the host reads and writes b directly (no staging
// transfer, no submission).
func (b *Buffer) Mapped() bool { return b.mapped != nil }

// Size is the buffer's size in bytes.
func (b *Buffer) Size() uint64 { return b.size }

// Write copies data into the buffer at byte offset off.
func (b *Buffer) Write(off uint64, data []byte) error { return b.transfer(off, data, true) }

// Read copies len(dst) bytes from byte offset off into dst.
func (b *Buffer) Read(off uint64, dst []byte) error { return b.transfer(off, dst, false) }

// transfer is Write (write set: host to buffer) and Read: a copy between
// host and len(host) bytes of the buffer at off, through the buffer's
// mapping or, when it has none, a host-visible staging buffer.
func (b *Buffer) transfer(off uint64, host []byte, write bool) error {
	if err := b.bounds(off, len(host)); err != nil || len(host) == 0 {
		return err
	}
	if err := b.hold(); err != nil {
		return err
	}
	defer b.release()
	if b.mapped != nil {
		mem := unsafe.Slice((*byte)(unsafe.Add(b.mapped, off)), len(host))
		if write {
			copy(mem, host)
		} else {
			copy(host, mem)
		}
		return nil
	}
	return b.dev.staging.transfer(b, off, host, write)
}

// hold enters the device and keeps the buffer alive until release: a
// concurrent Close then frees it only after the access.
func (b *Buffer) hold() error {
	d := b.dev
	if err := d.enter(); err != nil {
		return err
	}
	d.mu.Lock()
	closing := b.closing
	if !closing {
		b.users++
	}
	d.mu.Unlock()
	if closing {
		d.exit()
		return fmt.Errorf("%w: buffer of %d bytes", ErrClosed, b.size)
	}
	return nil
}

// release ends a hold, freeing the buffer if it was closed meanwhile.
func (b *Buffer) release() {
	d := b.dev
	d.mu.Lock()
	d.dropUserLocked(b)
	d.mu.Unlock()
	d.exit()
}

// dropUserLocked ends one use of b and frees it once closed and unused.
func (d *Device) dropUserLocked(b *Buffer) {
	b.users--
	if b.closing && b.users == 0 {
		d.freeBufferLocked(b)
	}
}

// freeBufferLocked removes b from the owner list and destroys it.
func (d *Device) freeBufferLocked(b *Buffer) {
	if _, owned := d.buffers[b]; !owned {
		b.destroy()
		return
	}
	delete(d.buffers, b)
	if b.borrowed {
		b.destroy()
		return
	}
	d.allocLog.live -= b.size
	if d.parkBufferLocked(b) {
		return
	}
	if b.memory != nil {
		d.allocLog.heapLive[b.heap] -= b.bytes
	}
	b.destroy()
}

// WriteFloat32 copies float32 values to element offset off.
func (b *Buffer) WriteFloat32(off uint64, v []float32) error {
	if len(v) == 0 {
		return nil
	}
	return b.Write(off*4, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

// ReadFloat32 fills dst from element offset off.
func (b *Buffer) ReadFloat32(off uint64, dst []float32) error {
	if len(dst) == 0 {
		return nil
	}
	return b.Read(off*4, unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)))
}

func (b *Buffer) bounds(off uint64, n int) error {
	if off+uint64(n) > b.size || off+uint64(n) < off {
		return fmt.Errorf("vk: access [%d, %d) outside a %d-byte buffer", off, off+uint64(n), b.size)
	}
	return nil
}

// bufferUse is what a buffer is for, which decides the memory it prefers.
type bufferUse int

const (
	deviceData  bufferUse = iota // tensors, outputs, parameters, scratch
	stagingData                  // the staging area, in host-visible system memory
)

// smallBuffer is the largest buffer a discrete GPU keeps in mappable device
// memory (the BAR window): parameters, lengths and other small buffers the
// host rewrites between runs, where a write is then a memcpy.
const smallBuffer = 64 << 10

// unified reports whether the device's memory is the host's (CPU and
// integrated devices): mappable device memory is then as fast as any.
func (d *Device) unified() bool { return d.Info.Type != core.DeviceDiscrete && !d.discreteModel() }

// SetDiscreteMemory places the buffers made from now on as on a discrete
// GPU whatever the device is: data buffers are never mapped, so every
// host write and read goes through the staging area and costs a
// submission and a wait, exactly the code a discrete GPU runs. Set it
// before making buffers (vkattn does at Open).
func (d *Device) SetDiscreteMemory(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.discrete = on
}

func (d *Device) discreteModel() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.discrete
}

// memoryTypesFor lists the memory types to try for a buffer of size bytes
// used as use, best first: for staging, host-visible coherent memory,
// system memory before device memory; a discrete GPU's data buffers larger
// than smallBuffer, plain device memory (fast for the kernels, and a BAR
// window is often only 256 MiB), then mappable device memory; otherwise
// device-local memory the host can map (no staging copies), then
// device-local memory alone. A full heap moves on to the next type.
func (d *Device) memoryTypesFor(bits uint32, size uint64, use bufferUse) []uint32 {
	hostBits := vulkan.MemoryPropertyHostVisibleBit | vulkan.MemoryPropertyHostCoherentBit
	if use == stagingData {
		if t, ok := d.findMemoryType(bits, hostBits, vulkan.MemoryPropertyDeviceLocalBit); ok {
			return []uint32{t}
		}
		if t, ok := d.findMemoryType(bits, hostBits, 0); ok {
			return []uint32{t}
		}
		return nil
	}
	var types []uint32
	mappable, mapOK := d.findMemoryType(bits, hostBits|vulkan.MemoryPropertyDeviceLocalBit, 0)
	plain, plainOK := d.findMemoryType(bits, vulkan.MemoryPropertyDeviceLocalBit, vulkan.MemoryPropertyHostVisibleBit)
	if plainOK && !d.unified() && size > smallBuffer {
		types = append(types, plain)
		plainOK = false
	}
	if mapOK {
		types = append(types, mappable)
	}
	if plainOK {
		types = append(types, plain)
	} else if len(types) == 0 {
		if t, ok := d.findMemoryType(bits, vulkan.MemoryPropertyDeviceLocalBit, 0); ok {
			types = append(types, t)
		}
	}
	return d.withinBudgetFirst(types, size)
}

// heapRoom is what each memory heap's budget leaves for d's buffers, where
// the device reports budgets (a variable for tests).
var heapRoom = func(d *Device) ([]uint64, bool) {
	if !d.Info.MemoryBudget {
		return nil, false
	}
	room, err := queryHeapRoom(d.inst.handle, d.Info.handle)
	return room, err == nil
}

// withinBudgetFirst orders types so that those whose heap's budget has room
// for size bytes come first (others may still allocate: the driver pages
// or fails, and a failure moves on to the next type).
func (d *Device) withinBudgetFirst(types []uint32, size uint64) []uint32 {
	room, ok := heapRoom(d)
	if !ok || len(types) < 2 {
		return types
	}
	fits := func(t uint32) bool {
		h := d.memTypes.MemoryTypes[t].HeapIndex
		return int(h) < len(room) && room[h] >= size
	}
	var first, rest []uint32
	for _, t := range types {
		if fits(t) {
			first = append(first, t)
		} else {
			rest = append(rest, t)
		}
	}
	return append(first, rest...)
}

// ErrOutOfMemory is wrapped by the error of a buffer that no memory heap
// has room for: beyond the heap's size (or SetHeapLimit's cap) counting
// the device's live buffers, or refused by the driver as out of memory.
var ErrOutOfMemory = errors.New("vk: out of device memory")

// allocationRoom refuses an allocation past maxMemoryAllocationCount
// (counting the spares, which hold theirs, and dropping them first when
// they are in the way).
func (d *Device) allocationRoom() error {
	limit := int(d.Info.Limits.MaxAllocations)
	if limit == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.buffers)+d.spare.count >= limit {
		d.dropSpareBuffersLocked()
	}
	if n := len(d.buffers); n >= limit {
		return fmt.Errorf("%w: %d device memory allocations alive, the device's maxMemoryAllocationCount", ErrOutOfMemory, n)
	}
	return nil
}

// heapSize is the bytes d may allocate on heap h: its reported size, or
// less under SetHeapLimit.
func (d *Device) heapSize(h uint32) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	size := uint64(d.memTypes.MemoryHeaps[h].Size)
	if lim := d.allocLog.heapLimit; lim > 0 {
		size = min(size, lim)
	}
	return size
}

// heapUse is the bytes d's live buffers hold on heap h.
func (d *Device) heapUse(h uint32) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.allocLog.heapLive[h]
}

// withHeapRoom keeps the memory types whose heap has room for bytes more
// beside d's live buffers; with none, the error says which heap is full.
// The driver may still refuse (other programs share the heap): that is
// ErrOutOfMemory too.
func (d *Device) withHeapRoom(types []uint32, bytes uint64) ([]uint32, error) {
	var kept []uint32
	var full error
	for _, t := range types {
		h := d.memTypes.MemoryTypes[t].HeapIndex
		use, size := d.heapUse(h), d.heapSize(h)
		if use <= size && bytes <= size-use {
			kept = append(kept, t)
		} else if full == nil {
			full = fmt.Errorf("%w: %d bytes asked of heap %d, which holds %d of its %d bytes", ErrOutOfMemory, bytes, h, use, size)
		}
	}
	return kept, full
}

// mapDeviceData maps the data buffers that can be mapped; tests turn it off
// to send every transfer through the staging area (lavapipe's memory is all
// mappable).
var mapDeviceData = true

// allocateMemory is vkAllocateMemory; tests replace it to fill a heap.
var allocateMemory = func(dev vulkan.Device, info *vulkan.MemoryAllocateInfo, mem *vulkan.DeviceMemory) vulkan.Result {
	return vulkan.AllocateMemory(dev, info, nil, mem)
}

// outOfMemory reports whether err is a full heap (device or host memory).
func outOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && (vulkan.Result(e.Result) == vulkan.ErrorOutOfDeviceMemory || vulkan.Result(e.Result) == vulkan.ErrorOutOfHostMemory)
}

// CopyTo copies size bytes from byte offset srcOff of b to dstOff of dst
// on the device, and waits for it.
func (b *Buffer) CopyTo(dst *Buffer, srcOff, dstOff, size uint64) error {
	if err := b.bounds(srcOff, int(size)); err != nil {
		return err
	}
	if err := dst.bounds(dstOff, int(size)); err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	if err := b.hold(); err != nil {
		return err
	}
	defer b.release()
	if err := dst.hold(); err != nil {
		return err
	}
	defer dst.release()
	return b.dev.copyNow(b, srcOff, dst, dstOff, size)
}

// copyNow records, submits and waits for one buffer copy (staging path);
// the caller holds both buffers.
func (d *Device) copyNow(src *Buffer, srcOff uint64, dst *Buffer, dstOff, size uint64) error {
	c, err := d.NewCommands(0)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.copyAndWait(src, srcOff, dst, dstOff, size)
}

// copyAndWait records one copy into c, submits it and waits for it.
func (c *Commands) copyAndWait(src *Buffer, srcOff uint64, dst *Buffer, dstOff, size uint64) error {
	if err := c.Begin(); err != nil {
		return err
	}
	if err := c.Copy(src, srcOff, dst, dstOff, size); err != nil {
		return err
	}
	if err := c.End(); err != nil {
		return err
	}
	if err := c.Submit(); err != nil {
		return err
	}
	return c.Wait(context.Background())
}

// viewKey names a texel view of a buffer: format and byte range.
type viewKey struct {
	format       vulkan.Format
	offset, size uint64
}

// texelView returns (creating once) a view of size bytes from offset (0:
// to the end, capped at the device's texel limit) in format, for binding
// as a uniform texel buffer. The caller holds b.dev.mu.
func (b *Buffer) texelView(format vulkan.Format, texelBytes, offset, size uint64) (vulkan.BufferView, error) {
	if offset > b.size || (offset+size) > b.size {
		return nil, fmt.Errorf("vk: texel view [%d, +%d) outside a %d-byte buffer", offset, size, b.size)
	}
	if a := b.dev.Info.Limits.MinTexelAlignment; a > 1 && offset%a != 0 {
		return nil, fmt.Errorf("vk: texel view offset %d is not a multiple of the device's %d", offset, a)
	}
	if size == 0 {
		size = b.size - offset
	}
	n := size / texelBytes
	if max := uint64(b.dev.Info.Limits.MaxTexelBufferElements); n > max {
		n = max // the planner splits tensors beyond this; the view covers what it can
	}
	key := viewKey{format, offset, n * texelBytes}
	if v, ok := b.views[key]; ok {
		return v, nil
	}
	var view vulkan.BufferView
	info := vulkan.BufferViewCreateInfo{
		SType:  vulkan.StructureTypeBufferViewCreateInfo,
		Buffer: b.handle,
		Format: format,
		Offset: vulkan.DeviceSize(offset),
		Range:  vulkan.DeviceSize(key.size),
	}
	defer info.Free()
	err := b.dev.call("vkCreateBufferView", func() vulkan.Result { return vulkan.CreateBufferView(b.dev.handle, &info, nil, &view) })
	if err != nil {
		return nil, err
	}
	objectCreated()
	if b.views == nil {
		b.views = map[viewKey]vulkan.BufferView{}
	}
	b.views[key] = view
	return view, nil
}

// Close frees the buffer, at once or, while submitted work still uses it,
// when that work is seen to finish. After the device's Close it is a
// no-op (the device freed it).
func (b *Buffer) Close() {
	if b == nil {
		return
	}
	d := b.dev
	d.closeLocked(func() {
		if b.closing {
			return
		}
		b.closing = true
		if b.users > 0 {
			d.pollLocked() // work that finished already need not delay the free
		}
		if b.users == 0 {
			d.freeBufferLocked(b)
		}
	})
}

// destroy frees the buffer's Vulkan objects; the device is entered (or
// being closed) and nothing uses the buffer.
func (b *Buffer) destroy() {
	if b.handle == nil {
		return
	}
	for _, v := range b.views {
		vulkan.DestroyBufferView(b.dev.handle, v, nil)
		objectDestroyed()
	}
	b.views = nil
	if b.borrowed {
		b.handle = nil
		return
	}
	if b.memory != nil {
		if b.mapped != nil {
			vulkan.UnmapMemory(b.dev.handle, b.memory)
			b.mapped = nil
		}
		vulkan.FreeMemory(b.dev.handle, b.memory, nil)
		b.memory = nil
		objectDestroyed()
	}
	b.destroyHandle()
}

func (b *Buffer) destroyHandle() {
	vulkan.DestroyBuffer(b.dev.handle, b.handle, nil)
	b.handle = nil
	objectDestroyed()
}
