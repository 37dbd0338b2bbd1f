package vk

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn/core"
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
	// QueueCount is how many queues of QueueFamily the owner created the
	// device with (its VkDeviceQueueCreateInfo.queueCount); 0 means 1.
	// QueueIndex must be below it and it within the family's queue count:
	// Vulkan gives no way to ask a device how many queues it was created
	// with, and vkGetDeviceQueue past them is undefined.
	QueueCount uint32
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
//
// Bad arguments (a nil handle, a queue the device does not have) are
// errors wrapping core.ErrOption; handles that are not null but not live
// Vulkan objects cannot be told apart from live ones and crash in the
// driver, as they would in the owner's own calls.
func Borrow(b Borrowed) (*Device, error) {
	var missing []string
	for name, isNil := range map[string]bool{"Instance": b.Instance == nil, "PhysicalDevice": b.PhysicalDevice == nil, "Device": b.Device == nil} {
		if isNil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, core.Errorf(core.ErrOption, "shared device: nil %s; the host's instance, physical device and device are required", strings.Join(missing, ", "))
	}
	if err := load(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	// In the process's first vkattn call, load ran vulkan-go's Init, which
	// resets its instance-level entry points (describe's and the owner's
	// own) to null: set them from the owner's instance again, as the
	// owner did after creating it.
	if err := vulkan.InitInstance(b.Instance); err != nil {
		return nil, fmt.Errorf("vk: vulkan-go InitInstance: %w", err)
	}
	pd, _, err := describe(b.Instance, b.PhysicalDevice)
	if err != nil {
		return nil, err
	}
	families, err := queueFamilies(b.Instance, b.PhysicalDevice)
	if err != nil {
		return nil, err
	}
	if int(b.QueueFamily) >= len(families) {
		return nil, core.Errorf(core.ErrOption, "shared device: QueueFamily %d, but %s has %d queue families (0 to %d)", b.QueueFamily, pd.Name, len(families), len(families)-1)
	}
	family := families[b.QueueFamily]
	if family.flags&vulkan.QueueComputeBit == 0 {
		return nil, core.Errorf(core.ErrOption, "shared device: QueueFamily %d of %s does not support compute", b.QueueFamily, pd.Name)
	}
	count := max(b.QueueCount, 1)
	if count > family.count {
		return nil, core.Errorf(core.ErrOption, "shared device: QueueCount %d, but queue family %d of %s has %d queue(s)", count, b.QueueFamily, pd.Name, family.count)
	}
	if b.QueueIndex >= count {
		return nil, core.Errorf(core.ErrOption, "shared device: QueueIndex %d, but QueueCount is %d (how many queues of family %d the device was created with; 0 means 1)",
			b.QueueIndex, count, b.QueueFamily)
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
	d, err := newDevice(in, pd, b.Device, calls, b.QueueIndex, true)
	if err == nil && d.queue == nil {
		d.Close()
		return nil, fmt.Errorf("vk: vkGetDeviceQueue: %s has no queue %d in family %d", pd.Name, b.QueueIndex, b.QueueFamily)
	}
	return d, err
}

// Handles are the Vulkan objects a Device runs on, for sharing it with
// another program (Borrowed): the instance, physical device, device and
// the queue it submits on. QueueCount is queueIndex+1, as many queues of
// the family as the device is known to have (the one vkattn creates, or
// those its owner counted).
func (d *Device) Handles() Borrowed {
	return Borrowed{Instance: d.inst.handle, PhysicalDevice: d.Info.handle, Device: d.handle,
		QueueFamily: d.Info.queueFamily, QueueIndex: d.queueIndex, QueueCount: d.queueIndex + 1,
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
