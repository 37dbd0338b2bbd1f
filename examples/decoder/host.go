package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	vulkan "github.com/vulkan-go/vulkan"
)

// Host is the program's own Vulkan device, made with vulkan-go alone: an
// instance (with the validation layer under VKATTN_VALIDATION=1), the
// first physical device with a compute queue family, a device with one
// queue of that family, and what a compute program records and submits
// with: one command pool and command buffer, one fence, one descriptor
// pool. It owns every buffer and kernel made through it; Close destroys
// them and then the device and instance.
type Host struct {
	Instance       vulkan.Instance
	PhysicalDevice vulkan.PhysicalDevice
	Device         vulkan.Device
	Family         uint32 // the queue family of Queue
	Queue          vulkan.Queue
	Name           string // the physical device's name
	// Cmd is the one command buffer: Begin resets and begins it, Submit
	// ends, submits and waits for it.
	Cmd vulkan.CommandBuffer

	memory    vulkan.PhysicalDeviceMemoryProperties
	pool      vulkan.CommandPool
	fence     vulkan.Fence
	descPool  vulkan.DescriptorPool
	buffers   []*Buffer
	kernels   []*Kernel
	recording bool

	// Submits and Waits count the host's queue submissions and its waits
	// for them to finish.
	Submits, Waits int
	// WaitLimit bounds one wait for a submission: lavapipe compiles each
	// kernel at its first dispatch, which can take seconds.
	WaitLimit time.Duration
}

// descriptorSets is how many descriptor sets the host's pool holds, and
// storage-buffer descriptors: every (kernel, buffers) pairing a program
// records is one set, made once.
const (
	descriptorSets     = 256
	descriptorsPerPool = 4 * descriptorSets
)

var loadVulkan = sync.OnceValue(func() error {
	if err := setProcAddr(); err != nil {
		return err
	}
	if err := vulkan.Init(); err != nil {
		return fmt.Errorf("vulkan-go Init: %w", err)
	}
	return nil
})

// NewHost makes the instance, device, queue, command buffer, fence and
// descriptor pool.
func NewHost() (*Host, error) {
	if err := loadVulkan(); err != nil {
		return nil, err
	}
	h := &Host{WaitLimit: 10 * time.Minute}
	if err := h.open(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func (h *Host) open() error {
	app := &vulkan.ApplicationInfo{SType: vulkan.StructureTypeApplicationInfo,
		PApplicationName: "vkattn decoder example\x00", ApiVersion: vulkan.MakeVersion(1, 1, 0)}
	info := &vulkan.InstanceCreateInfo{SType: vulkan.StructureTypeInstanceCreateInfo, PApplicationInfo: app}
	if os.Getenv("VKATTN_VALIDATION") == "1" {
		// With no callback of the host's, the layer prints what it finds
		// on standard output.
		info.EnabledLayerCount, info.PpEnabledLayerNames = 1, []string{"VK_LAYER_KHRONOS_validation\x00"}
	}
	var inst vulkan.Instance
	err := check("vkCreateInstance", vulkan.CreateInstance(info, nil, &inst))
	info.Free()
	app.Free()
	if err != nil {
		return err
	}
	h.Instance = inst
	// Without it the first instance-level call jumps to address 0.
	if err := vulkan.InitInstance(inst); err != nil {
		return fmt.Errorf("vulkan-go InitInstance: %w", err)
	}
	if err := h.pickDevice(); err != nil {
		return err
	}
	priorities := []float32{1}
	dinfo := &vulkan.DeviceCreateInfo{SType: vulkan.StructureTypeDeviceCreateInfo, QueueCreateInfoCount: 1,
		PQueueCreateInfos: []vulkan.DeviceQueueCreateInfo{{SType: vulkan.StructureTypeDeviceQueueCreateInfo,
			QueueFamilyIndex: h.Family, QueueCount: 1, PQueuePriorities: priorities}}}
	var dev vulkan.Device
	err = check("vkCreateDevice", vulkan.CreateDevice(h.PhysicalDevice, dinfo, nil, &dev))
	dinfo.Free()
	if err != nil {
		return err
	}
	h.Device = dev
	var queue vulkan.Queue
	vulkan.GetDeviceQueue(dev, h.Family, 0, &queue)
	h.Queue = queue

	pinfo := &vulkan.CommandPoolCreateInfo{SType: vulkan.StructureTypeCommandPoolCreateInfo,
		Flags: vulkan.CommandPoolCreateFlags(vulkan.CommandPoolCreateResetCommandBufferBit), QueueFamilyIndex: h.Family}
	var pool vulkan.CommandPool
	err = check("vkCreateCommandPool", vulkan.CreateCommandPool(dev, pinfo, nil, &pool))
	pinfo.Free()
	if err != nil {
		return err
	}
	h.pool = pool
	ainfo := &vulkan.CommandBufferAllocateInfo{SType: vulkan.StructureTypeCommandBufferAllocateInfo,
		CommandPool: pool, Level: vulkan.CommandBufferLevelPrimary, CommandBufferCount: 1}
	cmds := make([]vulkan.CommandBuffer, 1)
	err = check("vkAllocateCommandBuffers", vulkan.AllocateCommandBuffers(dev, ainfo, cmds))
	ainfo.Free()
	if err != nil {
		return err
	}
	h.Cmd = cmds[0]
	finfo := &vulkan.FenceCreateInfo{SType: vulkan.StructureTypeFenceCreateInfo}
	var fence vulkan.Fence
	err = check("vkCreateFence", vulkan.CreateFence(dev, finfo, nil, &fence))
	finfo.Free()
	if err != nil {
		return err
	}
	h.fence = fence
	dpinfo := &vulkan.DescriptorPoolCreateInfo{SType: vulkan.StructureTypeDescriptorPoolCreateInfo,
		MaxSets: descriptorSets, PoolSizeCount: 1,
		PPoolSizes: []vulkan.DescriptorPoolSize{{Type: vulkan.DescriptorTypeStorageBuffer, DescriptorCount: descriptorsPerPool}}}
	var dpool vulkan.DescriptorPool
	err = check("vkCreateDescriptorPool", vulkan.CreateDescriptorPool(dev, dpinfo, nil, &dpool))
	dpinfo.Free()
	if err != nil {
		return err
	}
	h.descPool = dpool
	return nil
}

// pickDevice takes the first physical device with a compute queue family.
func (h *Host) pickDevice() error {
	var n uint32
	if err := check("vkEnumeratePhysicalDevices", vulkan.EnumeratePhysicalDevices(h.Instance, &n, nil)); err != nil {
		return err
	}
	if n == 0 {
		return errors.New("no Vulkan device (on Debian and Ubuntu, mesa-vulkan-drivers has lavapipe, a CPU device)")
	}
	pds := make([]vulkan.PhysicalDevice, n)
	if err := check("vkEnumeratePhysicalDevices", vulkan.EnumeratePhysicalDevices(h.Instance, &n, pds)); err != nil {
		return err
	}
	for _, pd := range pds[:n] {
		var nf uint32
		vulkan.GetPhysicalDeviceQueueFamilyProperties(pd, &nf, nil)
		families := make([]vulkan.QueueFamilyProperties, nf)
		vulkan.GetPhysicalDeviceQueueFamilyProperties(pd, &nf, families)
		for i := range families[:nf] {
			families[i].Deref()
			if vulkan.QueueFlagBits(families[i].QueueFlags)&vulkan.QueueComputeBit == 0 {
				continue
			}
			h.PhysicalDevice, h.Family = pd, uint32(i)
			var props vulkan.PhysicalDeviceProperties
			vulkan.GetPhysicalDeviceProperties(pd, &props)
			props.Deref()
			h.Name = vulkan.ToString(props.DeviceName[:])
			var mem vulkan.PhysicalDeviceMemoryProperties
			vulkan.GetPhysicalDeviceMemoryProperties(pd, &mem)
			mem.Deref()
			for j := range mem.MemoryTypes[:mem.MemoryTypeCount] {
				mem.MemoryTypes[j].Deref()
			}
			h.memory = mem
			return nil
		}
	}
	return fmt.Errorf("none of the %d Vulkan devices has a compute queue", n)
}

// Begin resets the command buffer and begins recording into it.
func (h *Host) Begin() error {
	if h.recording {
		return errors.New("Begin: the command buffer is already recording")
	}
	if err := check("vkResetCommandBuffer", vulkan.ResetCommandBuffer(h.Cmd, 0)); err != nil {
		return err
	}
	info := &vulkan.CommandBufferBeginInfo{SType: vulkan.StructureTypeCommandBufferBeginInfo,
		Flags: vulkan.CommandBufferUsageFlags(vulkan.CommandBufferUsageOneTimeSubmitBit)}
	err := check("vkBeginCommandBuffer", vulkan.BeginCommandBuffer(h.Cmd, info))
	info.Free()
	h.recording = err == nil
	return err
}

// Barrier records a memory barrier from the compute shaders' writes so
// far to what dst's stages do next with dstAccess.
func (h *Host) Barrier(dst vulkan.PipelineStageFlagBits, dstAccess vulkan.AccessFlagBits) {
	barrier := []vulkan.MemoryBarrier{{SType: vulkan.StructureTypeMemoryBarrier,
		SrcAccessMask: vulkan.AccessFlags(vulkan.AccessShaderWriteBit), DstAccessMask: vulkan.AccessFlags(dstAccess)}}
	withoutGC(func() {
		vulkan.CmdPipelineBarrier(h.Cmd, vulkan.PipelineStageFlags(vulkan.PipelineStageComputeShaderBit),
			vulkan.PipelineStageFlags(dst), 0, 1, barrier, 0, nil, 0, nil)
	})
}

// Abandon ends a recording that will not be submitted; the next Begin
// resets it.
func (h *Host) Abandon() {
	if h.recording {
		vulkan.EndCommandBuffer(h.Cmd) // its result does not matter: nothing runs it
		h.recording = false
	}
}

// Submit ends the command buffer, submits it and waits for it to finish:
// one submission and one host wait. The last commands recorded must make
// what the host reads visible to it (Barrier with the host stage).
func (h *Host) Submit() error {
	if !h.recording {
		return errors.New("Submit: nothing recorded (Begin first)")
	}
	h.recording = false
	if err := check("vkEndCommandBuffer", vulkan.EndCommandBuffer(h.Cmd)); err != nil {
		return err
	}
	if err := check("vkResetFences", vulkan.ResetFences(h.Device, 1, []vulkan.Fence{h.fence})); err != nil {
		return err
	}
	submit := []vulkan.SubmitInfo{{SType: vulkan.StructureTypeSubmitInfo,
		CommandBufferCount: 1, PCommandBuffers: []vulkan.CommandBuffer{h.Cmd}}}
	var r vulkan.Result
	withoutGC(func() { r = vulkan.QueueSubmit(h.Queue, 1, submit, h.fence) })
	if err := check("vkQueueSubmit", r); err != nil {
		return err
	}
	h.Submits++
	return h.wait()
}

// wait waits for the fence, a second at a time up to WaitLimit, so that a
// long first dispatch (a kernel compiling) is not taken for a hang.
func (h *Host) wait() error {
	h.Waits++
	deadline := time.Now().Add(h.WaitLimit)
	for {
		r := vulkan.WaitForFences(h.Device, 1, []vulkan.Fence{h.fence}, vulkan.True, uint64(time.Second))
		if r != vulkan.Timeout {
			return check("vkWaitForFences", r)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vkWaitForFences: the submission has not finished after %v", h.WaitLimit)
		}
	}
}

// Close waits for the device to be idle and destroys everything the host
// made, kernels and buffers first, the device and instance last. A
// vkattn device opened on this host must be closed before. Safe to call
// more than once.
func (h *Host) Close() error {
	if h == nil {
		return nil
	}
	var err error
	if h.Device != nil {
		err = check("vkDeviceWaitIdle", vulkan.DeviceWaitIdle(h.Device))
		for i := len(h.kernels) - 1; i >= 0; i-- {
			h.kernels[i].destroy(h.Device)
		}
		h.kernels = nil
		for i := len(h.buffers) - 1; i >= 0; i-- {
			h.buffers[i].destroy(h.Device)
		}
		h.buffers = nil
		if h.descPool != nil {
			vulkan.DestroyDescriptorPool(h.Device, h.descPool, nil) // frees its sets
			h.descPool = nil
		}
		if h.fence != nil {
			vulkan.DestroyFence(h.Device, h.fence, nil)
			h.fence = nil
		}
		if h.pool != nil {
			vulkan.DestroyCommandPool(h.Device, h.pool, nil) // frees Cmd
			h.pool, h.Cmd = nil, nil
		}
		vulkan.DestroyDevice(h.Device, nil)
		h.Device = nil
	}
	if h.Instance != nil {
		vulkan.DestroyInstance(h.Instance, nil)
		h.Instance = nil
	}
	return err
}
