package vk

import (
	"context"
	"fmt"
	"time"

	vulkan "github.com/vulkan-go/vulkan"
)

// Commands is a recorded command buffer with its fence and, optionally,
// timestamp queries. Record once (Begin ... End), then Submit and Wait as
// often as needed.
type Commands struct {
	dev       *Device
	cmd       vulkan.CommandBuffer
	fence     vulkan.Fence
	queries   vulkan.QueryPool
	nQueries  uint32
	submitted bool
}

// NewCommands allocates a command buffer and fence, plus a pool of
// timestamps queries when timestamps > 0 and the device supports them.
func (d *Device) NewCommands(timestamps int) (*Commands, error) {
	c := &Commands{dev: d}
	bufs := make([]vulkan.CommandBuffer, 1)
	// vulkan-go keeps the C copy of each struct passed by pointer until Free.
	info := vulkan.CommandBufferAllocateInfo{
		SType:              vulkan.StructureTypeCommandBufferAllocateInfo,
		CommandPool:        d.pool,
		Level:              vulkan.CommandBufferLevelPrimary,
		CommandBufferCount: 1,
	}
	defer info.Free()
	err := check("vkAllocateCommandBuffers", vulkan.AllocateCommandBuffers(d.handle, &info, bufs))
	if err != nil {
		return nil, err
	}
	c.cmd = bufs[0]
	objectCreated()
	var fence vulkan.Fence
	fenceInfo := vulkan.FenceCreateInfo{SType: vulkan.StructureTypeFenceCreateInfo}
	defer fenceInfo.Free()
	if err := check("vkCreateFence", vulkan.CreateFence(d.handle, &fenceInfo, nil, &fence)); err != nil {
		c.Close()
		return nil, err
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
		if err := check("vkCreateQueryPool", vulkan.CreateQueryPool(d.handle, &queryInfo, nil, &qp)); err != nil {
			c.Close()
			return nil, err
		}
		c.queries = qp
		c.nQueries = uint32(timestamps)
		objectCreated()
	}
	return c, nil
}

// Begin starts recording (resetting the timestamp queries).
func (c *Commands) Begin() error {
	info := vulkan.CommandBufferBeginInfo{SType: vulkan.StructureTypeCommandBufferBeginInfo}
	defer info.Free() // vulkan-go keeps its C copy until Free
	if err := check("vkBeginCommandBuffer", vulkan.BeginCommandBuffer(c.cmd, &info)); err != nil {
		return err
	}
	if c.queries != nil {
		vulkan.CmdResetQueryPool(c.cmd, c.queries, 0, c.nQueries)
	}
	return nil
}

// Dispatch records a kernel dispatch of groups workgroups.
func (c *Commands) Dispatch(k *Kernel, set *DescriptorSet, groups [3]uint32) error {
	lim := c.dev.Info.Limits.MaxWorkGroupCount
	for i, g := range groups {
		if g == 0 || g > lim[i] {
			return fmt.Errorf("vk: kernel %s: %d workgroups on axis %d, device allows 1..%d", k.Spec.Name, g, i, lim[i])
		}
	}
	vulkan.CmdBindPipeline(c.cmd, vulkan.PipelineBindPointCompute, k.pipeline)
	vulkan.CmdBindDescriptorSets(c.cmd, vulkan.PipelineBindPointCompute, k.pipeLay, 0, 1, []vulkan.DescriptorSet{set.set}, 0, nil)
	vulkan.CmdDispatch(c.cmd, groups[0], groups[1], groups[2])
	return nil
}

// Push records the kernel's push constants for the dispatches that follow;
// data must be the kernel's PushSize bytes.
func (c *Commands) Push(k *Kernel, data []byte) error {
	if uint32(len(data)) != k.Spec.PushSize || len(data) == 0 {
		return fmt.Errorf("vk: kernel %s takes %d bytes of push constants, got %d", k.Spec.Name, k.Spec.PushSize, len(data))
	}
	// Copied into C memory: vulkan-go passes the pointer through unconverted.
	p := cBytes(data)
	defer cFree(p)
	vulkan.CmdPushConstants(c.cmd, k.pipeLay, vulkan.ShaderStageFlags(vulkan.ShaderStageComputeBit), 0, uint32(len(data)), p)
	return nil
}

// Barrier makes earlier shader and transfer writes visible to later shader
// work, transfers and the host.
func (c *Commands) Barrier() {
	stages := vulkan.PipelineStageFlags(vulkan.PipelineStageComputeShaderBit | vulkan.PipelineStageTransferBit)
	c.dev.barrier(c.cmd, stages, stages|vulkan.PipelineStageFlags(vulkan.PipelineStageHostBit),
		vulkan.AccessFlags(vulkan.AccessShaderWriteBit|vulkan.AccessTransferWriteBit),
		vulkan.AccessFlags(vulkan.AccessShaderReadBit|vulkan.AccessShaderWriteBit|
			vulkan.AccessTransferReadBit|vulkan.AccessTransferWriteBit|vulkan.AccessHostReadBit))
}

// Timestamp writes timestamp query i after all earlier work; a no-op on
// devices without timestamps.
func (c *Commands) Timestamp(i uint32) {
	if c.queries != nil && i < c.nQueries {
		vulkan.CmdWriteTimestamp(c.cmd, vulkan.PipelineStageBottomOfPipeBit, c.queries, i)
	}
}

// End finishes recording.
func (c *Commands) End() error {
	return check("vkEndCommandBuffer", vulkan.EndCommandBuffer(c.cmd))
}

// Submit queues the recorded commands.
func (c *Commands) Submit() error {
	if c.submitted {
		return fmt.Errorf("vk: commands submitted twice without Wait")
	}
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	if err := check("vkResetFences", vulkan.ResetFences(d.handle, 1, []vulkan.Fence{c.fence})); err != nil {
		return err
	}
	err := d.submit(c.cmd, c.fence)
	if err == nil {
		c.submitted = true
	}
	return err
}

// fenceSlice bounds one vkWaitForFences call so a cancelled context is
// noticed promptly; the total wait is unbounded (lavapipe compiles shaders
// at first dispatch and can take minutes).
const fenceSlice = 100 * time.Millisecond

// Wait blocks until the submitted work finishes or ctx is done. On
// cancellation the work keeps running on the device; Close waits for it.
func (c *Commands) Wait(ctx context.Context) error {
	if !c.submitted {
		return fmt.Errorf("vk: Wait without Submit")
	}
	for {
		r := vulkan.WaitForFences(c.dev.handle, 1, []vulkan.Fence{c.fence}, vulkan.True, uint64(fenceSlice))
		switch r {
		case vulkan.Success:
			c.submitted = false
			return nil
		case vulkan.Timeout:
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("vk: waiting for the device: %w", err)
			}
		default:
			return check("vkWaitForFences", r)
		}
	}
}

// Elapsed returns the device time between timestamps i and j of the last
// completed submission, and false when the device has no timestamps.
func (c *Commands) Elapsed(i, j uint32) (time.Duration, bool, error) {
	if c.queries == nil {
		return 0, false, nil
	}
	var ticks [2]uint64
	for n, q := range [2]uint32{i, j} {
		var v uint64
		err := check("vkGetQueryPoolResults", vulkan.GetQueryPoolResults(c.dev.handle, c.queries, q, 1, 8,
			unsafePointer(&v), 8, vulkan.QueryResultFlags(vulkan.QueryResult64Bit|vulkan.QueryResultWaitBit)))
		if err != nil {
			return 0, false, err
		}
		ticks[n] = v
	}
	ns := float64(ticks[1]-ticks[0]) * float64(c.dev.Info.Limits.TimestampPeriod)
	return time.Duration(ns), true, nil
}

// Close frees the command buffer, fence and queries. If work is still in
// flight (a cancelled Wait) it waits for the device first.
func (c *Commands) Close() {
	if c == nil {
		return
	}
	d := c.dev
	if c.submitted {
		vulkan.WaitForFences(d.handle, 1, []vulkan.Fence{c.fence}, vulkan.True, ^uint64(0))
		c.submitted = false
	}
	if c.queries != nil {
		vulkan.DestroyQueryPool(d.handle, c.queries, nil)
		c.queries = nil
		objectDestroyed()
	}
	if c.fence != nil {
		vulkan.DestroyFence(d.handle, c.fence, nil)
		c.fence = nil
		objectDestroyed()
	}
	if c.cmd != nil {
		vulkan.FreeCommandBuffers(d.handle, d.pool, 1, []vulkan.CommandBuffer{c.cmd})
		c.cmd = nil
		objectDestroyed()
	}
}
