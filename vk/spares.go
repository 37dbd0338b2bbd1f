package vk

import (
	"sync/atomic"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// Spares: what Close gives back is kept for the next object of the same
// kind instead of destroyed, so a program that makes and frees the same
// calls over and over (a one-shot call per layer per token) creates no
// Vulkan objects and allocates no memory in steady state: a discrete GPU
// pays tens of microseconds for each vkAllocateMemory and pool, and
// limits the number of allocations (maxMemoryAllocationCount, often
// 4096). Spares are bounded, are freed by the device's Close, and give
// their heap's room back when an allocation would not fit otherwise.
// A spare is not counted by LiveObjects: it is no one's object.

// Bounds on the spares of one device: buffers up to spareBufferMax bytes,
// spareBytesMax bytes and spareBuffersMax buffers in all; spareCommandsMax
// command buffers; spareSetsMax descriptor sets per kernel.
const (
	spareBufferMax   = 4 << 20
	spareBytesMax    = 64 << 20
	spareBuffersMax  = 256
	spareCommandsMax = 32
	spareSetsMax     = 32
)

// spareObjects is how many of liveObjects are spares.
var spareObjects atomic.Int64

// spareBuffer is a buffer's Vulkan objects, kept for a buffer of the same
// size and use.
type spareBuffer struct {
	handle  vulkan.Buffer
	memory  vulkan.DeviceMemory
	mapped  unsafe.Pointer
	views   map[viewKey]vulkan.BufferView
	heap    uint32
	bytes   uint64
	objects int64
	size    uint64
	use     bufferUse
	id      uint64
}

type spareBufferKey struct {
	size uint64
	use  bufferUse
}

// spareCommands is a Commands' objects, kept for one with as many
// timestamp queries.
type spareCommands struct {
	pool     vulkan.CommandPool
	cmd      vulkan.CommandBuffer
	fence    vulkan.Fence
	queries  vulkan.QueryPool
	nQueries uint32
}

func (s *spareCommands) objects() int64 {
	if s.queries != nil {
		return 4
	}
	return 3
}

// spareSet is a descriptor set with its pool, kept for the same kernel.
type spareSet struct {
	pool    vulkan.DescriptorPool
	set     vulkan.DescriptorSet
	written []descriptor
}

// spares are a device's spare objects, guarded by its mu.
type spares struct {
	buffers  map[spareBufferKey][]spareBuffer
	bytes    uint64
	count    int
	commands []spareCommands
}

// parkBufferLocked keeps b's objects as a spare if the bounds allow; it
// reports whether it did (b is then empty). The caller holds d.mu and
// nothing uses b.
func (d *Device) parkBufferLocked(b *Buffer) bool {
	s := &d.spare
	if d.closed || b.handle == nil || b.memory == nil || b.size > spareBufferMax ||
		s.bytes+b.size > spareBytesMax || s.count >= spareBuffersMax {
		return false
	}
	if s.buffers == nil {
		s.buffers = map[spareBufferKey][]spareBuffer{}
	}
	n := int64(2 + len(b.views))
	key := spareBufferKey{b.size, b.use}
	s.buffers[key] = append(s.buffers[key], spareBuffer{
		handle: b.handle, memory: b.memory, mapped: b.mapped, views: b.views,
		heap: b.heap, bytes: b.bytes, objects: n, size: b.size, use: b.use, id: b.id,
	})
	s.bytes += b.size
	s.count++
	spareObjects.Add(n)
	b.handle, b.memory, b.mapped, b.views = nil, nil, nil, nil
	return true
}

// reviveBufferLocked makes a buffer of a spare of size bytes and use, or
// returns nil. The caller holds d.mu.
func (d *Device) reviveBufferLocked(size uint64, use bufferUse) *Buffer {
	s := &d.spare
	key := spareBufferKey{size, use}
	list := s.buffers[key]
	if len(list) == 0 {
		return nil
	}
	sp := list[len(list)-1]
	s.buffers[key] = list[:len(list)-1]
	s.bytes -= sp.size
	s.count--
	spareObjects.Add(-sp.objects)
	return &Buffer{dev: d, handle: sp.handle, memory: sp.memory, mapped: sp.mapped, views: sp.views,
		heap: sp.heap, bytes: sp.bytes, size: sp.size, use: sp.use, id: sp.id}
}

// dropSpareBuffersLocked destroys every spare buffer, giving their heaps'
// room back; it reports whether there were any. The caller holds d.mu.
func (d *Device) dropSpareBuffersLocked() bool {
	s := &d.spare
	any := s.count > 0
	for _, list := range s.buffers {
		for _, sp := range list {
			spareObjects.Add(-sp.objects)
			b := &Buffer{dev: d, handle: sp.handle, memory: sp.memory, mapped: sp.mapped, views: sp.views}
			b.destroy()
			d.allocLog.heapLive[sp.heap] -= sp.bytes
		}
	}
	s.buffers, s.bytes, s.count = nil, 0, 0
	return any
}

// parkCommandsLocked keeps c's objects as a spare if the bound allows; it
// reports whether it did (c is then empty). The caller holds d.mu and
// nothing of c is in flight.
func (d *Device) parkCommandsLocked(c *Commands) bool {
	s := &d.spare
	if d.closed || len(s.commands) >= spareCommandsMax || c.pool == nil || c.cmd == nil || c.fence == nil || c.reset() != nil {
		return false
	}
	sp := spareCommands{pool: c.pool, cmd: c.cmd, fence: c.fence, queries: c.queries, nQueries: c.nQueries}
	s.commands = append(s.commands, sp)
	spareObjects.Add(sp.objects())
	c.pool, c.cmd, c.fence, c.queries = nil, nil, nil, nil
	c.destroyed = true
	return true
}

// reviveCommandsLocked fills c with a spare of nQueries timestamp
// queries; it reports whether there was one. The caller holds d.mu.
func (d *Device) reviveCommandsLocked(c *Commands, nQueries uint32) bool {
	s := &d.spare
	for i := len(s.commands) - 1; i >= 0; i-- {
		sp := s.commands[i]
		if sp.nQueries != nQueries {
			continue
		}
		s.commands = append(s.commands[:i], s.commands[i+1:]...)
		spareObjects.Add(-sp.objects())
		c.pool, c.cmd, c.fence, c.queries, c.nQueries = sp.pool, sp.cmd, sp.fence, sp.queries, sp.nQueries
		return true
	}
	return false
}

// dropSparesLocked destroys every spare of the device; its Close calls
// it.
func (d *Device) dropSparesLocked() {
	d.dropSpareBuffersLocked()
	for _, sp := range d.spare.commands {
		spareObjects.Add(-sp.objects())
		c := &Commands{dev: d, pool: sp.pool, cmd: sp.cmd, fence: sp.fence, queries: sp.queries}
		c.destroy()
	}
	d.spare.commands = nil
}

// parkSetLocked keeps s's pool and set for another set of its kernel if
// the bound allows; it reports whether it did. The caller holds dev.mu
// and no work uses s.
func (k *Kernel) parkSetLocked(s *DescriptorSet) bool {
	if k.dev.closed || len(k.spareSets) >= spareSetsMax || s.pool == nil {
		return false
	}
	k.spareSets = append(k.spareSets, spareSet{pool: s.pool, set: s.set, written: s.written})
	spareObjects.Add(1) // the pool; the set is part of it
	s.pool, s.set, s.buffers = nil, nil, nil
	return true
}

// dropSpareSetsLocked destroys the kernel's spare sets.
func (k *Kernel) dropSpareSetsLocked() {
	for _, sp := range k.spareSets {
		spareObjects.Add(-1)
		s := &DescriptorSet{kernel: k, pool: sp.pool}
		s.destroy()
	}
	k.spareSets = nil
}
