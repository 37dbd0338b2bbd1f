// Package viewer draws attention weights from the device they were
// computed on: Painter colours one head of a weights tensor (or its value
// contributions a_ij * ||v_j||) into a storage image with the heat-map
// palette, on the device, so a window can blit it to its swapchain without
// the weights passing through the host.
//
// This package needs no window system and builds everywhere; the window
// itself (GLFW, surface, swapchain, keys) is package viewer/window, built
// with the "viewer" build tag because GLFW needs the X11 headers.
package viewer

import (
	"errors"
	"fmt"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/heatmap"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/shaders"
	"github.com/vkattn/vkattn/vk"
)

// View is what the picture shows.
type View struct {
	Batch, Head  int
	Contribution bool // a_ij * ||v_j|| instead of a_ij
}

// Painter colours views of one weights tensor into Image, an S x L
// picture (pixel (j, i) is query i, key j).
type Painter struct {
	Image *vk.Image
	// B, H, HKV, L, S, DV are the problem's sizes: weights (B,H,L,S),
	// values (B,HKV,S,DV).
	B, H, HKV, L, S, DV int

	dev        *vk.Device
	kernel     *vk.Kernel
	set        *vk.DescriptorSet
	lut, scale *vk.Buffer
	weights    *vkattn.Tensor
	w, v       *vk.Buffer // the tensors' buffers, borrowed from vkattn's device
	wOff, vOff int
	wStr, vStr [3]int
	closed     bool
}

// Shared is dev as a device to share with vkattn (vkattn.OpenOn): the
// same queue, and the optional extensions dev enabled.
func Shared(dev *vk.Device) vkattn.SharedDevice {
	h := dev.Handles()
	return vkattn.SharedDevice{Instance: h.Instance, PhysicalDevice: h.PhysicalDevice, Device: h.Device,
		QueueFamily: h.QueueFamily, QueueIndex: h.QueueIndex,
		SubgroupSizeControl: h.SubgroupSizeControl, FullSubgroups: h.FullSubgroups, MemoryBudget: h.MemoryBudget,
		CooperativeMatrix: h.CooperativeMatrix}
}

// NewPainter prepares to draw weights (B,H,L,S), as Attention returns them
// with WantWeights, and values (B,H_kv,S,d_v), the V of the same call, on
// dev, the device the vkattn device of both is opened on (OpenOn).
func NewPainter(dev *vk.Device, weights, values *vkattn.Tensor) (*Painter, error) {
	ws, vs := weights.Shape(), values.Shape()
	p := &Painter{dev: dev, weights: weights, B: ws[0], H: ws[1], L: ws[2], S: ws[3], HKV: vs[1], DV: vs[3]}
	switch {
	case vs[0] != p.B || vs[2] != p.S:
		return nil, fmt.Errorf("viewer: values of shape %v do not match weights of shape %v", vs, ws)
	case p.HKV == 0 || p.H%p.HKV != 0:
		return nil, fmt.Errorf("viewer: %d value heads do not divide %d query heads", p.HKV, p.H)
	}
	if lim := int(dev.Info.Limits.MaxImageDimension2D); p.S > lim || p.L > lim {
		return nil, fmt.Errorf("viewer: a picture of %d keys x %d queries is larger than %s's images (%d pixels a side)", p.S, p.L, dev.Info.Name, lim)
	}
	wb, err := weights.Buffer()
	if err != nil {
		return nil, err
	}
	vb, err := values.Buffer()
	if err != nil {
		return nil, err
	}
	for name, b := range map[string]vkattn.DeviceBuffer{"weights": wb, "values": vb} {
		if b.Type != vkattn.Float32 {
			return nil, fmt.Errorf("viewer: the %s are %v, not float32", name, b.Type)
		}
		if max := uint64(dev.Info.Limits.MaxStorageBufferRange); b.Bytes > max {
			return nil, fmt.Errorf("viewer: the %s take %d bytes, more than one binding reaches on %s (%d); view a smaller problem",
				name, b.Bytes, dev.Info.Name, max)
		}
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	if p.w, err = dev.BorrowBuffer(wb.Handle, wb.Bytes); err != nil {
		return nil, err
	}
	if p.v, err = dev.BorrowBuffer(vb.Handle, vb.Bytes); err != nil {
		return nil, err
	}
	p.wOff, p.wStr, p.vOff, p.vStr = wb.Offset, wb.Strides, vb.Offset, vb.Strides
	code, err := shaders.SPIRV("heat_colour")
	if err != nil {
		return nil, err
	}
	p.kernel, err = dev.NewKernel(vk.KernelSpec{
		Name:     "heat_colour",
		SPIRV:    code,
		Bindings: []vk.BindingType{vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer, vk.StorageBuffer, vk.StorageImage},
		PushSize: uint32(len(pipelines.HeatColourPush{}.Bytes())),
	})
	if err != nil {
		return nil, err
	}
	pal := heatmap.Palette()
	packed := make([]byte, 4*len(pal))
	for i, c := range pal {
		copy(packed[4*i:], []byte{c.R, c.G, c.B, c.A}) // unpackUnorm4x8: R in the low byte
	}
	if p.lut, err = dev.NewBuffer(uint64(len(packed))); err != nil {
		return nil, err
	}
	if err := p.lut.Write(0, packed); err != nil {
		return nil, err
	}
	// The top of the scale, then ||v_j|| of the head drawn.
	if p.scale, err = dev.NewBuffer(4 * uint64(1+p.S)); err != nil {
		return nil, err
	}
	if err := p.scale.Write(0, make([]byte, 4*(1+p.S))); err != nil {
		return nil, err
	}
	if p.Image, err = dev.NewStorageImage(uint32(p.S), uint32(p.L)); err != nil {
		return nil, err
	}
	p.set, err = p.kernel.Bind([]vk.Arg{{Buffer: p.w}, {Buffer: p.v}, {Buffer: p.lut}, {Buffer: p.scale}, {Image: p.Image}})
	if err != nil {
		return nil, err
	}
	ok = true
	return p, nil
}

// check says why v cannot be drawn.
func (p *Painter) check(v View) error {
	if p.closed {
		return fmt.Errorf("%w: painter", vkattn.ErrClosed)
	}
	if v.Batch < 0 || v.Batch >= p.B || v.Head < 0 || v.Head >= p.H {
		return fmt.Errorf("viewer: batch %d head %d out of range (%d x %d)", v.Batch, v.Head, p.B, p.H)
	}
	return nil
}

// offsets are the element offsets of v's weights and value rows.
func (p *Painter) offsets(v View) (w, val int) {
	w = p.wOff + v.Batch*p.wStr[0] + v.Head*p.wStr[1]
	val = p.vOff + v.Batch*p.vStr[0] + v.Head/(p.H/p.HKV)*p.vStr[1]
	return w, val
}

// Record records the passes that colour v into Image, leaving it in
// vk.LayoutTransferSrc for a blit to the window or a copy back.
func (p *Painter) Record(c *vk.Commands, v View) error {
	if err := p.check(v); err != nil {
		return err
	}
	wOff, vOff := p.offsets(v)
	mode := uint32(0)
	if v.Contribution {
		mode = 1
	}
	push := func(pass uint32) []byte {
		return pipelines.HeatColourPush{
			WOffset: uint32(wOff), WRow: uint32(p.wStr[2]), VOffset: uint32(vOff), VRow: uint32(p.vStr[2]),
			L: uint32(p.L), S: uint32(p.S), Dv: uint32(p.DV), Mode: mode, Pass: pass, Colours: heatmap.PaletteSize,
		}.Bytes()
	}
	// Every pixel is rewritten: the old picture may be discarded.
	c.Transition(p.Image, vk.LayoutUndefined, vk.LayoutGeneral)
	var errs []error
	if v.Contribution {
		errs = append(errs, c.Push(p.kernel, push(0)),
			c.Dispatch(p.kernel, p.set, [3]uint32{uint32((p.S + 255) / 256), 1, 1}))
		c.Barrier()
	}
	errs = append(errs, c.Push(p.kernel, push(1)), c.Dispatch(p.kernel, p.set, [3]uint32{1, 1, 1}))
	c.Barrier()
	errs = append(errs, c.Push(p.kernel, push(2)),
		c.Dispatch(p.kernel, p.set, [3]uint32{uint32((p.S + 15) / 16), uint32((p.L + 15) / 16), 1}))
	c.Transition(p.Image, vk.LayoutGeneral, vk.LayoutTransferSrc)
	return errors.Join(errs...)
}

// Top is the top of the colour scale of the last view drawn (its largest
// value), once its commands have finished.
func (p *Painter) Top() (float32, error) {
	var top [1]float32
	return top[0], p.scale.ReadFloat32(0, top[:])
}

// Value is the weight of query i and key j in v (times ||v_j|| for a
// contribution, from the norms of the last view drawn, which must be v),
// read from the device: four bytes, for a window's title.
func (p *Painter) Value(v View, i, j int) (float32, error) {
	if err := p.check(v); err != nil {
		return 0, err
	}
	if i < 0 || i >= p.L || j < 0 || j >= p.S {
		return 0, fmt.Errorf("viewer: query %d key %d out of range (%d x %d)", i, j, p.L, p.S)
	}
	a, err := p.weights.At(v.Batch, v.Head, i, j)
	if err != nil {
		return 0, err
	}
	if !v.Contribution {
		return a, nil
	}
	var n [1]float32
	if err := p.scale.ReadFloat32(uint64(1+j), n[:]); err != nil {
		return 0, err
	}
	return a * n[0], nil
}

// Close frees the painter's kernel, buffers and image (not the tensors).
func (p *Painter) Close() {
	if p == nil || p.closed {
		return
	}
	p.closed = true
	p.set.Close()
	p.kernel.Close()
	p.Image.Close()
	p.lut.Close()
	p.scale.Close()
	p.w.Close()
	p.v.Close()
}
