package vk

import (
	"errors"
	"fmt"

	vulkan "github.com/vulkan-go/vulkan"
)

// Borrowed names a logical device another program made with vulkan-go (a
// renderer, another compute library) and the queue vkattn may submit on,
// and says which of the optional device features vkattn uses the owner
// enabled on it.
type Borrowed struct {
	Instance       vulkan.Instance
	PhysicalDevice vulkan.PhysicalDevice
	Device         vulkan.Device
	// QueueFamily must support compute. Vulkan requires submissions to one
	// queue to be externally synchronised: the owner does not submit to
	// this queue while a vkattn call runs (or gives vkattn a queue of its
	// own).
	QueueFamily, QueueIndex uint32
	// VK_EXT_subgroup_size_control with subgroupSizeControl (and
	// computeFullSubgroups) enabled: the tiled GPU kernels need both.
	SubgroupSizeControl, FullSubgroups bool
	// VK_EXT_memory_budget enabled.
	MemoryBudget bool
	// VK_KHR_cooperative_matrix with cooperativeMatrix, shaderFloat16,
	// vulkanMemoryModel and vulkanMemoryModelDeviceScope (their extensions
	// or Vulkan 1.2) enabled: the cooperative-matrix kernels need them.
	CooperativeMatrix bool
}

// Borrow makes a Device of a logical device its owner keeps: everything
// made through it (buffers, kernels, commands, its pipeline cache) is
// vkattn's and Close frees it, after waiting for its own submissions; the
// device, its queues and the instance stay the owner's, open.
func Borrow(b Borrowed) (*Device, error) {
	if b.Instance == nil || b.PhysicalDevice == nil || b.Device == nil {
		return nil, errors.New("vk: Borrow: an instance, a physical device and a device are required")
	}
	if err := load(); err != nil {
		return nil, err
	}
	pd, _, err := describe(b.Instance, b.PhysicalDevice)
	if err != nil {
		return nil, err
	}
	families, err := queueFamilies(b.Instance, b.PhysicalDevice)
	if err != nil {
		return nil, err
	}
	if int(b.QueueFamily) >= len(families) || families[b.QueueFamily].flags&vulkan.QueueComputeBit == 0 {
		return nil, fmt.Errorf("vk: Borrow: queue family %d of %s does not support compute", b.QueueFamily, pd.Name)
	}
	pd.queueFamily = b.QueueFamily
	pd.TimestampsOK = families[b.QueueFamily].timestampBits > 0 && pd.Limits.TimestampPeriod > 0
	// Only what the owner enabled is used.
	pd.SubgroupSizeControl = pd.SubgroupSizeControl && b.SubgroupSizeControl
	pd.FullSubgroups = pd.FullSubgroups && pd.SubgroupSizeControl && b.FullSubgroups
	pd.MemoryBudget = pd.MemoryBudget && b.MemoryBudget
	if !b.CooperativeMatrix {
		pd.CooperativeMatrices = nil
	}
	calls, err := resolveDevice(b.Instance, b.Device)
	if err != nil {
		return nil, err
	}
	in := &Instance{handle: b.Instance, borrowed: true, devices: []PhysicalDevice{pd}, surfaces: map[*Surface]struct{}{}}
	return newDevice(in, pd, b.Device, calls, b.QueueIndex, true)
}

// Handles are the Vulkan objects a Device runs on, for sharing it with
// another program (Borrowed): the instance, physical device, device and
// the queue it submits on.
func (d *Device) Handles() Borrowed {
	return Borrowed{Instance: d.inst.handle, PhysicalDevice: d.Info.handle, Device: d.handle,
		QueueFamily: d.Info.queueFamily, QueueIndex: d.queueIndex,
		SubgroupSizeControl: d.Info.SubgroupSizeControl, FullSubgroups: d.Info.FullSubgroups, MemoryBudget: d.Info.MemoryBudget,
		CooperativeMatrix: d.Info.CooperativeMatrices != nil}
}

// BorrowBuffer makes a Buffer of a VkBuffer of size bytes that another
// Device on the same logical device (or another program) owns, so kernels
// here can bind it: its Close frees only the views made of it here.
func (d *Device) BorrowBuffer(h vulkan.Buffer, size uint64) (*Buffer, error) {
	if h == nil || size == 0 {
		return nil, errors.New("vk: BorrowBuffer: a buffer and its size are required")
	}
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	b := &Buffer{dev: d, handle: h, size: size, use: deviceData, id: bufferIDs.Add(1), borrowed: true}
	own(&d.mu, d.buffers, b)
	return b, nil
}

// Handle is the VkBuffer, for sharing with another program (BorrowBuffer).
func (b *Buffer) Handle() vulkan.Buffer { return b.handle }
