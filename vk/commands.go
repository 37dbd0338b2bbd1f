package vk

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	vulkan "github.com/vulkan-go/vulkan"
)

// Commands is a recorded command buffer with its own command pool, its
// fence and, optionally, timestamp queries. Record once (Begin ... End),
// then Submit and Wait as often as needed. Each Commands has its own pool
// so goroutines record in parallel without locking each other out.
//
// The methods of one Commands are serialized by its lock; the buffers its
// dispatches and copies use are kept alive while a submission is in
// flight, so closing one of them then (after a cancelled Wait) is safe.
type Commands struct {
	dev      *Device
	mu       sync.Mutex
	pool     vulkan.CommandPool
	cmd      vulkan.CommandBuffer
	fence    vulkan.Fence
	queries  vulkan.QueryPool
	nQueries uint32
	uses     map[*Buffer]struct{} // buffers the recorded commands use
	err      error                // first recording error, returned by End
	open     bool                 // between a Begin and its End: recording
	foreign  bool                 // a host's command buffer (Device.Foreign)
	// Guarded by dev.mu:
	submitted bool // in flight: submitted and not yet seen finished
	destroyed bool
}

// NewCommands allocates a command buffer and fence, plus a pool of
// timestamps queries when timestamps > 0 and the device supports them.
func (d *Device) NewCommands(timestamps int) (*Commands, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	c := &Commands{dev: d, uses: map[*Buffer]struct{}{}}
	nQueries := uint32(0)
	if timestamps > 0 && d.Info.TimestampsOK {
		nQueries = uint32(timestamps)
	}
	d.mu.Lock()
	revived := d.reviveCommandsLocked(c, nQueries)
	if revived {
		d.commands[c] = struct{}{}
	}
	d.mu.Unlock()
	if revived {
		return c, nil
	}
	fail := func(err error) (*Commands, error) {
		c.destroy()
		return nil, err
	}
	var pool vulkan.CommandPool
	poolInfo := vulkan.CommandPoolCreateInfo{
		SType:            vulkan.StructureTypeCommandPoolCreateInfo,
		Flags:            vulkan.CommandPoolCreateFlags(vulkan.CommandPoolCreateResetCommandBufferBit),
		QueueFamilyIndex: d.Info.queueFamily,
	}
	defer poolInfo.Free() // vulkan-go keeps the C copy of each struct passed by pointer until Free
	if err := d.call("vkCreateCommandPool", func() vulkan.Result { return vulkan.CreateCommandPool(d.handle, &poolInfo, nil, &pool) }); err != nil {
		return fail(err)
	}
	c.pool = pool
	objectCreated()
	bufs := make([]vulkan.CommandBuffer, 1)
	info := vulkan.CommandBufferAllocateInfo{
		SType:              vulkan.StructureTypeCommandBufferAllocateInfo,
		CommandPool:        c.pool,
		Level:              vulkan.CommandBufferLevelPrimary,
		CommandBufferCount: 1,
	}
	defer info.Free()
	if err := d.call("vkAllocateCommandBuffers", func() vulkan.Result { return vulkan.AllocateCommandBuffers(d.handle, &info, bufs) }); err != nil {
		return fail(err)
	}
	c.cmd = bufs[0]
	objectCreated()
	var fence vulkan.Fence
	fenceInfo := vulkan.FenceCreateInfo{SType: vulkan.StructureTypeFenceCreateInfo}
	defer fenceInfo.Free()
	if err := d.call("vkCreateFence", func() vulkan.Result { return vulkan.CreateFence(d.handle, &fenceInfo, nil, &fence) }); err != nil {
		return fail(err)
	}
	c.fence = fence
	objectCreated()
	if timestamps > 0 && d.Info.TimestampsOK {
		var qp vulkan.QueryPool
		queryInfo := vulkan.QueryPoolCreateInfo{
			SType:      vulkan.StructureTypeQueryPoolCreateInfo,
			QueryType:  vulkan.QueryTypeTimestamp,
			QueryCount: uint32(timestamps),
		}
		defer queryInfo.Free()
		if err := d.call("vkCreateQueryPool", func() vulkan.Result { return vulkan.CreateQueryPool(d.handle, &queryInfo, nil, &qp) }); err != nil {
			return fail(err)
		}
		c.queries = qp
		c.nQueries = uint32(timestamps)
		objectCreated()
	}
	own(&d.mu, d.commands, c)
	d.mu.Lock()
	d.allocLog.commands++
	d.mu.Unlock()
	return c, nil
}

// recording runs fn on the command buffer with the device entered; a
// failure is kept for End to return.
func (c *Commands) recording(fn func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if err := c.dev.enter(); err != nil {
		c.err = err
		return err
	}
	defer c.dev.exit()
	if err := c.live(); err != nil {
		c.err = err
		return err
	}
	c.dev.mu.Lock()
	inFlight := c.submitted
	c.dev.mu.Unlock()
	if inFlight {
		// Its buffer list must not change while retiring may read it.
		return fmt.Errorf("vk: recording commands that are still in flight")
	}
	c.err = fn()
	return c.err
}

// live reports ErrClosed once the commands were closed.
func (c *Commands) live() error {
	c.dev.mu.Lock()
	defer c.dev.mu.Unlock()
	if c.destroyed {
		return fmt.Errorf("%w: commands", ErrClosed)
	}
	return nil
}

// Begin starts recording (resetting the timestamp queries).
func (c *Commands) Begin() error {
	if c.foreign {
		return c.errForeign("beginning")
	}
	c.mu.Lock()
	c.err = nil
	c.mu.Unlock()
	return c.recording(func() error {
		c.uses = map[*Buffer]struct{}{}
		if err := c.reset(); err != nil {
			return err
		}
		info := vulkan.CommandBufferBeginInfo{SType: vulkan.StructureTypeCommandBufferBeginInfo}
		defer info.Free() // vulkan-go keeps its C copy until Free
		if err := c.dev.call("vkBeginCommandBuffer", func() vulkan.Result { return vulkan.BeginCommandBuffer(c.cmd, &info) }); err != nil {
			return err
		}
		c.open = true
		if c.queries != nil {
			vulkan.CmdResetQueryPool(c.cmd, c.queries, 0, c.nQueries)
		}
		return nil
	})
}

// Dispatch records a kernel dispatch of groups workgroups.
func (c *Commands) Dispatch(k *Kernel, set *DescriptorSet, groups [3]uint32) error {
	lim := c.dev.Info.Limits.MaxWorkGroupCount
	for i, g := range groups {
		if g == 0 || g > lim[i] {
			return fmt.Errorf("vk: kernel %s: %d workgroups on axis %d, device allows 1..%d", k.Spec.Name, g, i, lim[i])
		}
	}
	return c.recording(func() error {
		if set.kernel != k {
			return fmt.Errorf("vk: kernel %s dispatched with a descriptor set of kernel %s", k.Spec.Name, set.kernel.Spec.Name)
		}
		for _, b := range set.buffers {
			c.uses[b] = struct{}{}
		}
		vulkan.CmdBindPipeline(c.cmd, vulkan.PipelineBindPointCompute, k.pipeline)
		vulkan.CmdBindDescriptorSets(c.cmd, vulkan.PipelineBindPointCompute, k.pipeLay, 0, 1, []vulkan.DescriptorSet{set.set}, 0, nil)
		vulkan.CmdDispatch(c.cmd, groups[0], groups[1], groups[2])
		return nil
	})
}

// Copy records a copy of size bytes between buffers.
func (c *Commands) Copy(src *Buffer, srcOff uint64, dst *Buffer, dstOff, size uint64) error {
	if srcOff+size > src.size || dstOff+size > dst.size {
		return fmt.Errorf("vk: copy of %d bytes outside a %d- or %d-byte buffer", size, src.size, dst.size)
	}
	return c.recording(func() error {
		c.uses[src], c.uses[dst] = struct{}{}, struct{}{}
		c.dev.copyBuffer(c.cmd, src.handle, dst.handle, srcOff, dstOff, size)
		c.dev.countStaged(src, dst, size)
		return nil
	})
}

// Region is one range of a CopyRegions: Size bytes from Src in the source
// buffer to Dst in the destination.
type Region struct{ Src, Dst, Size uint64 }

// CopyRegions records a copy of every region from src to dst in one
// command (vkCmdCopyBuffer with many regions): a scatter or gather of rows
// costs one command, not one per row. Regions must lie inside the buffers,
// have a positive size and, where src and dst are one buffer, not overlap.
func (c *Commands) CopyRegions(src, dst *Buffer, regions []Region) error {
	if len(regions) == 0 {
		return nil
	}
	if len(regions) > math.MaxUint32 {
		return fmt.Errorf("vk: %d copy regions in one command", len(regions))
	}
	staged := uint64(0)
	for _, r := range regions {
		if r.Size == 0 || r.Src+r.Size > src.size || r.Dst+r.Size > dst.size || r.Src+r.Size < r.Src || r.Dst+r.Size < r.Dst {
			return fmt.Errorf("vk: copy region of %d bytes from %d to %d outside a %d- or %d-byte buffer", r.Size, r.Src, r.Dst, src.size, dst.size)
		}
		staged += r.Size
	}
	return c.recording(func() error {
		c.uses[src], c.uses[dst] = struct{}{}, struct{}{}
		c.dev.copyRegions(c.cmd, src.handle, dst.handle, regions)
		c.dev.countStaged(src, dst, staged)
		return nil
	})
}

// countStaged counts n bytes copied between src and dst as staged when
// either is a staging buffer. They are counted as recorded: commands that
// stage are recorded for each submission.
func (d *Device) countStaged(src, dst *Buffer, n uint64) {
	if src.use == stagingData || dst.use == stagingData {
		d.mu.Lock()
		d.allocLog.stagingBytes += n
		d.mu.Unlock()
	}
}

// Once records fn's commands (copies, updates) into one command buffer,
// then submits it and waits: many transfers for one round trip. The
// commands come from the spares, so Once allocates nothing in steady
// state.
func (d *Device) Once(fn func(*Commands) error) error {
	c, err := d.Later(fn)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Wait(context.Background())
}

// Later is Once without the wait: it returns the commands in flight.
// Later submissions on the device run after them (their closing barrier
// orders them before everything submitted next), so device work needs no
// wait; the host waits only to touch what they write, and Close (which
// waits if they are still running) frees them.
func (d *Device) Later(fn func(*Commands) error) (*Commands, error) {
	c, err := d.NewCommands(0)
	if err != nil {
		return nil, err
	}
	err = c.Begin()
	if err == nil {
		err = fn(c)
	}
	if err == nil {
		c.Barrier()
		err = c.End()
	}
	if err == nil {
		err = c.Submit()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Update records a write of data (at most 64 KiB, a multiple of 4 bytes)
// into dst at off, carried in the command buffer itself: parameters that
// a replay rewrites cost no staging transfer where dst is not mapped.
func (c *Commands) Update(dst *Buffer, off uint64, data []byte) error {
	if len(data) == 0 || len(data)%4 != 0 || len(data) > 65536 || off%4 != 0 || off+uint64(len(data)) > dst.size {
		return fmt.Errorf("vk: inline update of %d bytes at %d into a %d-byte buffer (want a multiple of 4 up to 64 KiB, inside it)", len(data), off, dst.size)
	}
	return c.recording(func() error {
		c.uses[dst] = struct{}{}
		p := cBytes(data) // C memory: vulkan-go passes the pointer on
		defer cFree(p)
		vulkan.CmdUpdateBuffer(c.cmd, dst.handle, vulkan.DeviceSize(off), vulkan.DeviceSize(len(data)), (*uint32)(p))
		return nil
	})
}

// Fill records size bytes of dst from off set to copies of the 32-bit
// word (vkCmdFillBuffer): memory zeroed or set on the device, with no host
// copy of it. off and size must be multiples of 4, inside dst.
func (c *Commands) Fill(dst *Buffer, off, size uint64, word uint32) error {
	if size == 0 || size%4 != 0 || off%4 != 0 || off > dst.size || size > dst.size-off {
		return fmt.Errorf("vk: fill of %d bytes at %d into a %d-byte buffer (want a multiple of 4, inside it)", size, off, dst.size)
	}
	return c.recording(func() error {
		c.uses[dst] = struct{}{}
		vulkan.CmdFillBuffer(c.cmd, dst.handle, vulkan.DeviceSize(off), vulkan.DeviceSize(size), word)
		return nil
	})
}

// Push records the kernel's push constants for the dispatches that follow;
// data must be the kernel's PushSize bytes.
func (c *Commands) Push(k *Kernel, data []byte) error {
	if uint32(len(data)) != k.Spec.PushSize || len(data) == 0 {
		return fmt.Errorf("vk: kernel %s takes %d bytes of push constants, got %d", k.Spec.Name, k.Spec.PushSize, len(data))
	}
	return c.recording(func() error {
		// Copied into C memory: vulkan-go passes the pointer through unconverted.
		p := cBytes(data)
		defer cFree(p)
		vulkan.CmdPushConstants(c.cmd, k.pipeLay, vulkan.ShaderStageFlags(vulkan.ShaderStageComputeBit), 0, uint32(len(data)), p)
		return nil
	})
}

// Barrier makes earlier shader and transfer writes visible to later shader
// work, transfers and the host. A failure is returned by End.
func (c *Commands) Barrier() {
	c.recording(func() error {
		stages := vulkan.PipelineStageFlags(vulkan.PipelineStageComputeShaderBit | vulkan.PipelineStageTransferBit)
		c.dev.barrier(c.cmd, stages, stages|vulkan.PipelineStageFlags(vulkan.PipelineStageHostBit),
			vulkan.AccessFlags(vulkan.AccessShaderWriteBit|vulkan.AccessTransferWriteBit),
			vulkan.AccessFlags(vulkan.AccessShaderReadBit|vulkan.AccessShaderWriteBit|
				vulkan.AccessTransferReadBit|vulkan.AccessTransferWriteBit|vulkan.AccessHostReadBit))
		return nil
	})
}

// Timestamp writes timestamp query i after all earlier work; a no-op on
// devices without timestamps. A failure is returned by End.
func (c *Commands) Timestamp(i uint32) {
	c.recording(func() error {
		if c.queries != nil && i < c.nQueries {
			vulkan.CmdWriteTimestamp(c.cmd, vulkan.PipelineStageBottomOfPipeBit, c.queries, i)
		}
		return nil
	})
}

// End finishes recording; it returns the first error of the recording.
func (c *Commands) End() error {
	if c.foreign {
		return c.errForeign("ending")
	}
	return c.recording(func() error {
		// Still recording if End fails: reset then returns the buffer to
		// the initial state before the next Begin.
		err := c.dev.call("vkEndCommandBuffer", func() vulkan.Result { return vulkan.EndCommandBuffer(c.cmd) })
		c.open = err != nil
		return err
	})
}

// reset returns a recording that failed before its End to the initial
// state (vkBeginCommandBuffer resets only executable buffers implicitly).
func (c *Commands) reset() error {
	if !c.open {
		return nil
	}
	err := c.dev.call("vkResetCommandBuffer", func() vulkan.Result { return vulkan.ResetCommandBuffer(c.cmd, 0) })
	c.open = err != nil
	return err
}

// Submit queues the recorded commands. Commands still in flight from an
// earlier Submit (a cancelled Wait) are an error: Wait for them first.
// Every buffer the commands use must still be open.
func (c *Commands) Submit() error { return c.submitWith(nil, nil) }

// submitWith is Submit waiting for and signalling semaphores (SubmitSignal).
func (c *Commands) submitWith(wait, signal *Semaphore) error {
	if c.foreign {
		return c.errForeign("submitting")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dev
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case c.destroyed:
		return fmt.Errorf("%w: commands", ErrClosed)
	case c.submitted:
		return fmt.Errorf("vk: commands submitted again while still in flight")
	case c.err != nil:
		return fmt.Errorf("vk: submitting commands whose recording failed: %w", c.err)
	}
	for b := range c.uses {
		if b.closing {
			return fmt.Errorf("%w: a buffer of %d bytes the commands use", ErrClosed, b.size)
		}
	}
	if err := c.dev.call("vkResetFences", func() vulkan.Result { return vulkan.ResetFences(d.handle, 1, []vulkan.Fence{c.fence}) }); err != nil {
		return err
	}
	var err error
	if wait == nil && signal == nil {
		err = d.submit(c.cmd, c.fence)
	} else {
		err = d.submitSems(c.cmd, c.fence, wait, signal)
	}
	if err != nil {
		return err
	}
	c.submitted = true
	d.allocLog.submits++
	d.inFlight[c] = struct{}{}
	for b := range c.uses {
		b.users++
	}
	return nil
}

// retireLocked records that c's submission finished: its buffers are free
// to go. The caller holds d.mu and knows the fence is signalled.
func (d *Device) retireLocked(c *Commands) {
	if !c.submitted {
		return
	}
	c.submitted = false
	delete(d.inFlight, c)
	for b := range c.uses {
		d.dropUserLocked(b)
	}
}

// pollLocked retires every submission whose fence has signalled. The
// caller holds d.mu and has entered the device.
func (d *Device) pollLocked() {
	for c := range d.inFlight {
		if vulkan.GetFenceStatus(d.handle, c.fence) == vulkan.Success {
			d.retireLocked(c)
		}
	}
}

// fenceSlice bounds one vkWaitForFences call so a cancelled context is
// noticed promptly (a deadline ends the slice it falls in); the total wait
// is unbounded (lavapipe compiles shaders at first dispatch and can take
// minutes).
const fenceSlice = 50 * time.Millisecond

// Wait blocks until the submitted work finishes or ctx is done; nothing
// in flight returns at once. On cancellation the work keeps running on the
// device (Wait again, or Close, which waits for it).
func (c *Commands) Wait(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.dev.enter(); err != nil {
		return err
	}
	defer c.dev.exit()
	return c.wait(ctx)
}

// wait is Wait with c.mu held and the device entered.
func (c *Commands) wait(ctx context.Context) error {
	d := c.dev
	for waited := false; ; waited = true {
		d.mu.Lock()
		inFlight, lost := c.submitted, d.lost.Load()
		if inFlight && !waited {
			d.allocLog.waits++
		}
		d.mu.Unlock()
		if !inFlight {
			return nil
		}
		if lost {
			// The submission will never finish: fail at once.
			return fmt.Errorf("%w: device %s", ErrDeviceLost, d)
		}
		slice := fenceSlice
		if dl, ok := ctx.Deadline(); ok {
			slice = min(slice, max(time.Until(dl), time.Millisecond))
		}
		r := made("vkWaitForFences", func() vulkan.Result {
			return vulkan.WaitForFences(d.handle, 1, []vulkan.Fence{c.fence}, vulkan.True, uint64(slice))
		})
		switch r {
		case vulkan.Success:
			d.mu.Lock()
			d.retireLocked(c)
			d.mu.Unlock()
			return nil
		case vulkan.Timeout:
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("vk: waiting for the device: %w", err)
			}
		default:
			err := check("vkWaitForFences", r)
			d.noteLost(err)
			return err
		}
	}
}

// Elapsed returns the device time between timestamps i and j of the last
// completed submission, and false when the device has no timestamps.
func (c *Commands) Elapsed(i, j uint32) (time.Duration, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queries == nil {
		return 0, false, nil
	}
	d := c.dev
	if err := d.enter(); err != nil {
		return 0, false, err
	}
	defer d.exit()
	if err := c.live(); err != nil {
		return 0, false, err
	}
	var ticks [2]uint64
	for n, q := range [2]uint32{i, j} {
		var v uint64
		err := c.dev.call("vkGetQueryPoolResults", func() vulkan.Result {
			return vulkan.GetQueryPoolResults(d.handle, c.queries, q, 1, 8,
				unsafePointer(&v), 8, vulkan.QueryResultFlags(vulkan.QueryResult64Bit|vulkan.QueryResultWaitBit))
		})
		if err != nil {
			return 0, false, err
		}
		ticks[n] = v
	}
	ns := float64(ticks[1]-ticks[0]) * float64(d.Info.Limits.TimestampPeriod)
	return time.Duration(ns), true, nil
}

// Close frees the command buffer, pool, fence and queries. If work is
// still in flight (a cancelled Wait) it waits for it first. After the
// device's Close it is a no-op.
func (c *Commands) Close() {
	if c == nil || c.foreign {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.dev
	if d.enter() != nil {
		return
	}
	defer d.exit()
	d.mu.Lock()
	destroyed := c.destroyed
	if !destroyed && c.submitted && vulkan.GetFenceStatus(d.handle, c.fence) == vulkan.Success {
		d.retireLocked(c) // finished already: closing it is no wait
	}
	d.mu.Unlock()
	if destroyed {
		return
	}
	if err := c.wait(context.Background()); err != nil {
		// The fence is lost (device lost): retire anyway, the device's
		// Close waits for the queue before freeing anything else.
		d.mu.Lock()
		d.retireLocked(c)
		d.mu.Unlock()
	}
	d.mu.Lock()
	delete(d.commands, c)
	parked := d.parkCommandsLocked(c)
	d.mu.Unlock()
	if !parked {
		c.destroy()
	}
}

// destroy frees the Vulkan objects; nothing of c is in flight.
func (c *Commands) destroy() {
	d := c.dev
	c.destroyed = true
	destroyOnce(&c.queries, func(q vulkan.QueryPool) { vulkan.DestroyQueryPool(d.handle, q, nil) })
	destroyOnce(&c.fence, func(f vulkan.Fence) { vulkan.DestroyFence(d.handle, f, nil) })
	destroyOnce(&c.cmd, func(cb vulkan.CommandBuffer) {
		vulkan.FreeCommandBuffers(d.handle, c.pool, 1, []vulkan.CommandBuffer{cb})
	})
	destroyOnce(&c.pool, func(p vulkan.CommandPool) { vulkan.DestroyCommandPool(d.handle, p, nil) })
}
