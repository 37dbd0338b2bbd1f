package engine

import (
	"errors"
	"fmt"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/pipelines/dispatch"
	"github.com/vkattn/vkattn/vk"
)

// OpenOn makes a Device on a host program's Vulkan device (the root
// package's OpenOn documents it).
func OpenOn(h vk.Borrowed, cfg Config) (*Device, error) {
	dev, err := vk.Borrow(h)
	if err != nil {
		return nil, sharedError(err)
	}
	return openOn(nil, dev, cfg), nil
}

// sharedError is OpenOn's refusal: vk.Borrow's bad arguments wrap
// ErrOption and a missing loader ErrNoDriver; any other error is a Vulkan
// call failing on the host's device, which wraps ErrDevice.
func sharedError(err error) error {
	err = driverError(err)
	if errors.Is(err, core.ErrOption) || errors.Is(err, core.ErrNoDriver) {
		return err
	}
	return fmt.Errorf("%w: shared device: %w", core.ErrDevice, err)
}

// openOn makes the Device of dev (and inst, which Close closes after it;
// nil for a shared device).
func openOn(inst *vk.Instance, dev *vk.Device, cfg Config) *Device {
	if lim := cfg.BindingLimit; lim > 0 {
		l := &dev.Info.Limits
		l.MaxStorageBufferRange = min(l.MaxStorageBufferRange, lim)
		l.MaxTexelBufferElements = min(l.MaxTexelBufferElements, lim/16) // RGBA32UI views reach lim bytes
	}
	d := &Device{
		instance: inst,
		dev:      dev,
		kernels:  dispatch.NewKernels(dev),
		path:     cfg.LoadPath,
		tuning:   pipelines.DefaultTuning(dev.Info.DeviceInfo),
		tensors:  map[*Tensor]struct{}{},
	}
	if cfg.MemoryLimit > 0 {
		dev.SetHeapLimit(cfg.MemoryLimit)
	}
	if discrete(cfg) {
		dev.SetDiscreteMemory(true)
		d.memory = DiscreteMemory
	}
	if !d.path.Valid() {
		d.path = core.AutoLoadPath
	}
	if vendor, t, err := planAs(cfg); err == nil && vendor != "" {
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

// BufferOf is where t's values live: its buffer's VkBuffer and size,
// its element offset and strides; ErrClosed once t is closed.
func BufferOf(t *Tensor) (h vulkan.Buffer, bytes uint64, offset int, strides [3]int, err error) {
	if t == nil {
		return nil, 0, 0, strides, errorf(core.ErrShape, "nil tensor")
	}
	if t.root().closed.Load() {
		return nil, 0, 0, strides, errorf(core.ErrClosed, "tensor used after Close")
	}
	return t.buf.Handle(), t.buf.Size(), t.offset, t.strides, nil
}
