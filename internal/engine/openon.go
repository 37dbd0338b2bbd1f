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

// SharedDevice is a Vulkan device a host program made with vulkan-go
// (github.com/vulkan-go/vulkan) and shares with vkattn (OpenOn): a
// renderer that draws what vkattn computes without copying it through
// the host, another compute library. The handles stay the host's.
type SharedDevice struct {
	Instance       vulkan.Instance
	PhysicalDevice vulkan.PhysicalDevice
	Device         vulkan.Device
	// The queue vkattn submits on; its family must support compute.
	// Vulkan requires a queue's submissions to be externally synchronised:
	// the host does not submit to it while a vkattn call runs, or gives
	// vkattn a queue of its own.
	QueueFamily, QueueIndex uint32
	// QueueCount is how many queues of QueueFamily the host created the
	// device with (the queueCount of its VkDeviceQueueCreateInfo for that
	// family); 0 means 1, the usual single queue. Vulkan cannot be asked
	// how many queues a device was created with, so OpenOn checks
	// QueueIndex against this count, and the count against the family's
	// (vkGetPhysicalDeviceQueueFamilyProperties).
	QueueCount uint32
	// The optional device extensions vkattn uses, where the host enabled
	// them: VK_EXT_subgroup_size_control with subgroupSizeControl and
	// computeFullSubgroups (the tiled GPU kernels need both), and
	// VK_EXT_memory_budget; VK_KHR_cooperative_matrix with its
	// cooperativeMatrix feature, shaderFloat16, vulkanMemoryModel and
	// vulkanMemoryModelDeviceScope (the cooperative-matrix kernels). vkattn
	// plans without what is not enabled.
	SubgroupSizeControl, FullSubgroups, MemoryBudget, CooperativeMatrix bool
}

// OpenOn makes a Device on a host program's Vulkan device. cfg's LoadPath,
// DefaultTuning, BindingLimit, MemoryLimit, Memory and PlanAs apply (an
// unknown PlanAs or LoadPath, which Open refuses, plans with the device's
// own tuning or lets the planner choose); Device and Validation are the
// host's choice. The Device's Close frees what vkattn made on it (tensors,
// kernels, commands, its pipeline cache), after waiting for vkattn's own
// submissions, and leaves the instance, device and queues to the host,
// which closes them after it.
//
// OpenOn may be the process's first vkattn call, before or after any
// other. It refuses with ErrOption a nil handle, a queue family the
// physical device does not have or that has no compute, a QueueCount
// beyond the family's and a QueueIndex not below QueueCount; with
// ErrNoDriver a missing Vulkan loader; with ErrDevice a Vulkan call it
// needs on the device failing. A handle that is not null but not a live
// Vulkan object of its kind cannot be detected: Vulkan has no such
// query, and using it crashes in the driver, as in the host's own calls.
func OpenOn(h SharedDevice, cfg Config) (*Device, error) {
	dev, err := vk.Borrow(vk.Borrowed{Instance: h.Instance, PhysicalDevice: h.PhysicalDevice, Device: h.Device,
		QueueFamily: h.QueueFamily, QueueIndex: h.QueueIndex, QueueCount: h.QueueCount,
		SubgroupSizeControl: h.SubgroupSizeControl, FullSubgroups: h.FullSubgroups, MemoryBudget: h.MemoryBudget,
		CooperativeMatrix: h.CooperativeMatrix})
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
	if cfg.discrete() {
		dev.SetDiscreteMemory(true)
		d.memory = DiscreteMemory
	}
	if !d.path.Valid() {
		d.path = core.AutoLoadPath
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

// DeviceBuffer is where a tensor's values live on the device, for a
// host program's own kernels on a shared device (OpenOn).
type DeviceBuffer struct {
	Handle  vulkan.Buffer // vkattn's VkBuffer: valid until the tensor is closed
	Bytes   uint64        // its size
	Offset  int           // element offset of the first value
	Strides [3]int        // element strides of the batch, head and position axes; the last axis is contiguous
	Type    core.DType
}

// Buffer says where the tensor's values live on the device. It fails once
// the tensor is closed.
func (t *Tensor) Buffer() (DeviceBuffer, error) {
	if t.root().closed.Load() {
		return DeviceBuffer{}, errorf(core.ErrClosed, "tensor used after Close")
	}
	return DeviceBuffer{Handle: t.buf.Handle(), Bytes: t.buf.Size(), Offset: t.offset, Strides: t.strides, Type: t.dtype}, nil
}
