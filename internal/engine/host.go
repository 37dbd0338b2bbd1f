package engine

import (
	"math"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/vk"
)

// What a host program that shares its device (OpenOn) adds: tensors over
// its own buffers and vkattn's work recorded into its command buffers.
// SEMANTICS.md §13 states the contract.

// HostUsage is the usage a host's buffer must have been created with for
// vkattn to read, write and copy it: storage and uniform texel bindings
// (the load paths) and transfers (uploads, downloads, a decode step's
// copies).
const HostUsage = vulkan.BufferUsageStorageBufferBit | vulkan.BufferUsageUniformTexelBufferBit |
	vulkan.BufferUsageTransferSrcBit | vulkan.BufferUsageTransferDstBit

// Region is a region of a host's VkBuffer to view as a tensor.
type Region struct {
	Buffer vulkan.Buffer
	Size   uint64
	Usage  vulkan.BufferUsageFlags
	Offset uint64
	Shape  [4]int
	Type   core.DType
	Bound  float64
}

// TensorOver makes a tensor over r, a region of a buffer the host owns on
// d's shared device: a view of a tensor over the whole buffer, which
// vkattn never frees (its Close forgets the views made of it).
func (d *Device) TensorOver(r Region) (*Tensor, error) {
	if d == nil {
		return nil, errorf(core.ErrClosed, "tensor over a host buffer: nil device")
	}
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if d.instance != nil {
		return nil, errorf(core.ErrOption, "tensor over a host buffer: the device is vkattn's own (Open); a host shares its device with OpenOn")
	}
	if r.Buffer == nil || r.Size == 0 {
		return nil, errorf(core.ErrShape, "tensor over a host buffer: a VkBuffer and its size are required")
	}
	if missing := HostUsage &^ vulkan.BufferUsageFlagBits(r.Usage); missing != 0 {
		return nil, errorf(core.ErrOption, "tensor over a host buffer: its usage %#x lacks %#x (vkattn binds it as a storage and a uniform texel buffer and copies to and from it)", uint32(r.Usage), uint32(missing))
	}
	if r.Type.Quantized() {
		return nil, errorf(core.ErrOption, "tensor over a host buffer: %v is not taken (float32, float16 or bfloat16)", r.Type)
	}
	for _, n := range r.Shape {
		if n <= 0 {
			return nil, errorf(core.ErrShape, "tensor over a host buffer: shape %v has an empty axis", r.Shape)
		}
	}
	size := uint64(r.Type.Bytes())
	if r.Offset%size != 0 {
		return nil, errorf(core.ErrShape, "tensor over a host buffer: offset %d bytes is not a multiple of %v's %d", r.Offset, r.Type, size)
	}
	n := uint64(r.Shape[0]) * uint64(r.Shape[1]) * uint64(r.Shape[2]) * uint64(r.Shape[3])
	if n > math.MaxInt32 || r.Offset > r.Size || n*size > r.Size-r.Offset {
		return nil, errorf(core.ErrShape, "tensor over a host buffer: %d elements of %v from byte %d pass the buffer's %d bytes", n, r.Type, r.Offset, r.Size)
	}
	if math.IsNaN(r.Bound) || math.IsInf(r.Bound, 0) || r.Bound < 0 {
		return nil, errorf(core.ErrOption, "tensor over a host buffer: bound %g: want the finite largest |value| the host writes there", r.Bound)
	}
	buf, err := d.dev.BorrowBuffer(r.Buffer, r.Size)
	if err != nil {
		return nil, DeviceError(err)
	}
	// Whole 32-bit words: the root covers the buffer's words, as a
	// tensor vkattn allocates does.
	whole := int(r.Size/4*4) / int(size)
	root := &Tensor{dev: d, buf: buf, dtype: r.Type, shape: [4]int{1, 1, 1, whole}, strides: [3]int{whole, whole, whole}, finite: true, bound: r.Bound}
	s := r.Shape
	view := &Tensor{dev: d, buf: buf, owner: root, dtype: r.Type, shape: s, offset: int(r.Offset / size),
		strides: [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}, finite: true}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		buf.Close()
		return nil, err
	}
	d.tensors[root] = struct{}{}
	return view, nil
}

// Foreign is the host's command buffer cmd, allocated on the VkDevice dev,
// as commands vkattn records into; dev must be the device d shares.
func (d *Device) Foreign(dev vulkan.Device, cmd vulkan.CommandBuffer) (*vk.Commands, error) {
	if d == nil {
		return nil, errorf(core.ErrClosed, "recording: nil device")
	}
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	if d.instance != nil {
		return nil, errorf(core.ErrOption, "recording into a host's command buffer: the device is vkattn's own (Open); a host shares its device with OpenOn")
	}
	if cmd == nil {
		return nil, errorf(core.ErrOption, "recording: no command buffer")
	}
	if dev != d.dev.Handles().Device {
		return nil, errorf(core.ErrDevice, "recording: the command buffer's device is not the one shared with vkattn (OpenOn)")
	}
	c, err := d.dev.Foreign(cmd)
	return c, DeviceError(err)
}

// Record records c's work into cmds (Foreign), with before's and after's
// transfers around it (nil: none): c's check runs now; a call whose
// check follows its wait (a backward's) cannot be recorded. Once
// recorded, c's Close waits for the device to go idle before freeing.
func Record[O interface{ Close() }](c *Prepared[O], cmds *vk.Commands, before, after func(*vk.Commands) error) error {
	return record(c, cmds, before, after, true)
}

// RecordOwn is Record into commands of vkattn's own, which the caller
// submits and waits for (several calls in one submission): c's Close needs
// no wait for the whole device then.
func RecordOwn[O interface{ Close() }](c *Prepared[O], cmds *vk.Commands, before, after func(*vk.Commands) error) error {
	return record(c, cmds, before, after, false)
}

func record[O interface{ Close() }](c *Prepared[O], cmds *vk.Commands, before, after func(*vk.Commands) error, foreign bool) error {
	if c == nil {
		return errorf(core.ErrClosed, "recording: nil call")
	}
	if c.check != nil {
		if err := c.check(); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.commands == nil {
		return errorf(core.ErrClosed, "call recorded after Close")
	}
	if c.after != nil {
		return errorf(core.ErrOption, "recording: this call checks its results after the host's wait (a backward's finite gradients), which a recorded call cannot")
	}
	c.recorded = c.recorded || foreign
	return DeviceError(c.commands.RecordInto(cmds, before, after))
}

// RecordFor is Record of c alone into the host's command buffer cmd,
// allocated on the VkDevice dev: a prepared call's or layer's Record.
func RecordFor[O interface{ Close() }](c *Prepared[O], dev vulkan.Device, cmd vulkan.CommandBuffer) error {
	if c == nil {
		return errorf(core.ErrClosed, "recording: nil call")
	}
	cmds, err := c.dev.Foreign(dev, cmd)
	if err != nil {
		return err
	}
	return Record(c, cmds, nil, nil)
}

// CallDevice is the device c was prepared on.
func CallDevice[O interface{ Close() }](c *Prepared[O]) *Device { return c.dev }
