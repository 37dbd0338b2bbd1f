package vkattn

import (
	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/vk"
)

// Inside a host program's own Vulkan work (SEMANTICS.md §13): the device
// it shares, tensors over its buffers, and calls recorded into its command
// buffers.

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
	d, err := engine.OpenOn(vk.Borrowed{Instance: h.Instance, PhysicalDevice: h.PhysicalDevice, Device: h.Device,
		QueueFamily: h.QueueFamily, QueueIndex: h.QueueIndex, QueueCount: h.QueueCount,
		SubgroupSizeControl: h.SubgroupSizeControl, FullSubgroups: h.FullSubgroups, MemoryBudget: h.MemoryBudget,
		CooperativeMatrix: h.CooperativeMatrix}, cfg)
	return (*Device)(d), err
}

// DeviceBuffer is where a tensor's values live on the device, for a
// host program's own kernels on a shared device (OpenOn).
type DeviceBuffer struct {
	Handle  vulkan.Buffer // vkattn's VkBuffer: valid until the tensor is closed
	Bytes   uint64        // its size
	Offset  int           // element offset of the first value
	Strides [3]int        // element strides of the batch, head and position axes; the last axis is contiguous
	Type    DType
}

// Buffer says where the tensor's values live on the device. It fails once
// the tensor is closed.
func (t *Tensor) Buffer() (DeviceBuffer, error) {
	h, bytes, offset, strides, err := engine.BufferOf(t.e())
	if err != nil {
		return DeviceBuffer{}, err
	}
	return DeviceBuffer{Handle: h, Bytes: bytes, Offset: offset, Strides: strides, Type: t.DType()}, nil
}

// BufferRegion is a region of a host program's VkBuffer to read as a
// tensor (Device.TensorOver).
type BufferRegion struct {
	// Buffer is the host's VkBuffer, made on the device it shares with
	// vkattn (OpenOn), and Size its size in bytes as created.
	Buffer vulkan.Buffer
	Size   uint64
	// Usage is the usage the buffer was created with (Vulkan cannot be
	// asked): it must include storage buffer, uniform texel buffer,
	// transfer source and transfer destination (HostBufferUsage).
	Usage vulkan.BufferUsageFlags
	// Offset is the byte offset of the first element, a multiple of the
	// element's size; the elements follow dense and row-major.
	Offset uint64
	// Shape has 1 to 4 axes, filled from the left with ones as in Upload.
	Shape []int
	// Type is float32, float16 or bfloat16.
	Type DType
	// Bound is the host's promise that every value it writes there is
	// finite and at most Bound in magnitude: the float32 range checks of
	// the calls that read the tensor (SEMANTICS.md §9) use it, and a value
	// past it makes their results undefined.
	Bound float64
}

// HostBufferUsage is the usage a host's buffer needs for TensorOver.
const HostBufferUsage = vulkan.BufferUsageFlags(engine.HostUsage)

// TensorOver makes a tensor over a region of a host program's VkBuffer on
// a device shared with OpenOn: no copy and no ownership. vkattn reads and
// writes the host's memory in place, never frees or resizes the buffer,
// and the tensor's Close only forgets it (the host destroys the buffer
// after that Close, or after the device's). A region past the buffer's
// size, an offset not a multiple of the element size, an empty axis or a
// bound that is not finite is ErrShape or ErrOption, and so is a usage
// without HostBufferUsage's bits or a device of vkattn's own (Open).
func (d *Device) TensorOver(r BufferRegion) (*Tensor, error) {
	s, err := core.Shape4(r.Shape)
	if err != nil {
		return nil, err
	}
	return tensorResult(d.e().TensorOver(engine.Region{Buffer: r.Buffer, Size: r.Size, Usage: r.Usage,
		Offset: r.Offset, Shape: s, Type: r.Type, Bound: r.Bound}))
}

// CommandBuffer is a host program's command buffer in the recording state
// (between its vkBeginCommandBuffer and vkEndCommandBuffer), allocated on
// Device, the VkDevice it shares with vkattn (OpenOn): vkattn checks that
// the two agree, since Vulkan cannot say which device a command buffer
// belongs to.
type CommandBuffer struct {
	Device vulkan.Device
	Buffer vulkan.CommandBuffer
}

// Record records the call's work into the host's command buffer instead
// of submitting it: Run's commands, for the host to submit with its own
// (SEMANTICS.md §13). It begins with a barrier that makes earlier compute
// and transfer writes visible to its reads and ends with one that makes
// its writes visible to later compute, transfer and host reads, so the
// host needs no barrier of its own around it. Record puts the call's
// parameters into the command buffer itself; the inputs are read, and the
// outputs written, when the host's submission runs. Each recording is one
// run: record again for the next. A call recorded once waits, at its
// Close, for the device to go idle before freeing anything. Recording
// into a command buffer of another device, on a device vkattn opened
// itself (Open), or after Close is an error.
func (c *Call) Record(cmd CommandBuffer) error {
	return engine.RecordFor(c.e(), cmd.Device, cmd.Buffer)
}
