package vkattn

import (
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// OpenOn makes a Device of a Vulkan instance and device the caller created
// with package vk, for work of its own on the same device: a viewer that
// enables a window's extensions and draws the weights vkattn computes
// without copying them through the host. cfg's LoadPath, DefaultTuning,
// BindingLimit, MemoryLimit, Memory and PlanAs apply (an unknown PlanAs or LoadPath, which Open
// refuses, plans with the device's own tuning or lets the planner choose);
// Device and Validation were the caller's choice. The
// Device takes both over: its Close closes dev, then inst.
func OpenOn(inst *vk.Instance, dev *vk.Device, cfg Config) *Device {
	if lim := cfg.BindingLimit; lim > 0 {
		l := &dev.Info.Limits
		l.MaxStorageBufferRange = min(l.MaxStorageBufferRange, lim)
		l.MaxTexelBufferElements = min(l.MaxTexelBufferElements, lim/16) // RGBA32UI views reach lim bytes
	}
	d := &Device{
		instance: inst,
		dev:      dev,
		kernels:  pipelines.NewKernels(dev),
		path:     cfg.LoadPath,
		tuning:   pipelines.DefaultTuning(dev.Info),
		tensors:  map[*Tensor]struct{}{},
	}
	if cfg.MemoryLimit > 0 {
		dev.SetHeapLimit(cfg.MemoryLimit)
	}
	if cfg.discrete() {
		dev.SetDiscreteMemory(true)
		d.memory = DiscreteMemory
	}
	if !d.path.Valid() {
		d.path = AutoLoadPath
	}
	if vendor, t, err := cfg.planAs(); err == nil && vendor != "" {
		d.tuning, d.plannedAs = t, vendor
	} else if !cfg.DefaultTuning {
		// A saved tuning that no longer loads or fits (a hand edit, a
		// new vkattn) falls back to the defaults rather than failing.
		if t, err := LoadTuning(dev.Info.DeviceInfo); err == nil && t.Check(dev.Info.DeviceInfo) == nil {
			d.tuning = t
		}
	}
	return d
}

// Buffer exposes where the tensor's values live on the device, for the
// caller's own kernels (see OpenOn): the buffer, the float32 element
// offset of the first value and the element strides of the batch, head
// and position axes (the last axis is contiguous). It fails once the
// tensor is closed.
func (t *Tensor) Buffer() (buf *vk.Buffer, offset int, strides [3]int, err error) {
	if t.root().closed.Load() {
		return nil, 0, strides, errorf(ErrClosed, "tensor used after Close")
	}
	return t.buf, t.offset, t.strides, nil
}
