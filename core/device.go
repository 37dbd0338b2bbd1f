package core

import (
	"fmt"
	"strings"
)

// What vkattn knows of a Vulkan device, as plain data: package vk fills it
// in from the driver, the planner and the user read it.

// DeviceType mirrors VkPhysicalDeviceType.
type DeviceType int

const (
	DeviceOther DeviceType = iota
	DeviceIntegrated
	DeviceDiscrete
	DeviceVirtual
	DeviceCPU
)

// Driver IDs (VkDriverId) the planner's quirk table keys on.
const (
	DriverIDLavapipe     = 13 // VK_DRIVER_ID_MESA_LLVMPIPE
	DriverIDNvidia       = 4  // VK_DRIVER_ID_NVIDIA_PROPRIETARY
	DriverIDAMDOpen      = 2  // VK_DRIVER_ID_AMD_OPEN_SOURCE
	DriverIDMesaRADV     = 3  // VK_DRIVER_ID_MESA_RADV
	DriverIDIntelMesa    = 6  // VK_DRIVER_ID_INTEL_OPEN_SOURCE_MESA
	DriverIDIntelWindows = 5  // VK_DRIVER_ID_INTEL_PROPRIETARY_WINDOWS
)

// Limits are the device limits vkattn plans with.
type Limits struct {
	MaxStorageBufferRange   uint32
	MaxTexelBufferElements  uint32
	MaxUniformBufferRange   uint32
	MaxPushConstantsSize    uint32
	MaxSharedMemory         uint32
	MaxWorkGroupCount       [3]uint32
	MaxWorkGroupSize        [3]uint32
	MaxWorkGroupInvocations uint32
	MinStorageAlignment     uint64
	MinTexelAlignment       uint64
	MinUniformAlignment     uint64
	TimestampPeriod         float32
	SubgroupSize            uint32
	SubgroupShuffle         bool // compute shaders may use subgroupShuffle (and subgroupShuffleXor)
	// MinSubgroupSize and MaxSubgroupSize bound the subgroup sizes a
	// compute shader may run with (both SubgroupSize without subgroup size
	// control: a variable-width device may then run narrower subgroups).
	MinSubgroupSize, MaxSubgroupSize uint32
	MaxMemoryAllocation              uint64 // largest heap, a bound for one allocation
	MaxImageDimension2D              uint32 // widest and tallest 2D image (the viewer's picture)
	MaxAllocations                   uint32 // maxMemoryAllocationCount: device memory allocations alive at once
	// Descriptors one shader stage may use (maxPerStageDescriptor*: uniform
	// texel buffers count as sampled images; maxPerStageResources): a
	// kernel binds up to some twenty buffers. 0: not known, not checked.
	MaxStageUniformBuffers, MaxStageStorageBuffers, MaxStageSampledImages, MaxStageStorageImages, MaxStageResources uint32
}

// DeviceInfo describes a Vulkan device: name, type, driver, limits and
// the features vkattn plans with.
type DeviceInfo struct {
	Index       int // in the instance's enumeration order
	Name        string
	Type        DeviceType
	VendorID    uint32
	DeviceID    uint32
	APIVersion  string
	DriverID    uint32
	DriverName  string
	DriverInfo  string
	Limits      Limits
	HostVisible bool // a device-local memory type is also host visible
	TexelR32F   bool // R32_SFLOAT is usable as a uniform texel buffer (masks)
	// The raw-word formats the texel load path reads inputs through (a
	// usamplerBuffer): R32_UINT and R16_UINT for one element a texel, and
	// R32G32B32A32_UINT and R16G16B16A16_UINT for four.
	TexelWords, TexelWords4 bool
	TimestampsOK            bool // the compute queue supports timestamps
	// SubgroupSizeControl: VK_EXT_subgroup_size_control with compute
	// pipelines allowed to require a subgroup size; FullSubgroups: they may
	// also require full subgroups. Devices are opened with both where offered.
	SubgroupSizeControl, FullSubgroups bool
	// MemoryBudget: VK_EXT_memory_budget, so buffers prefer memory types
	// whose heap's budget has room for them.
	MemoryBudget bool
	// PipelineCacheUUID names the driver build's pipeline cache format.
	PipelineCacheUUID [16]byte
	// CooperativeMatrices are the matrix shapes and types of
	// VK_KHR_cooperative_matrix, where the device offers the extension
	// with its feature, shaderFloat16, vulkanMemoryModel and
	// vulkanMemoryModelDeviceScope (devices are then opened with them); nil
	// elsewhere.
	CooperativeMatrices []CooperativeMatrix
}

// CacheKey names this exact device and driver build (vendor, device and
// pipeline cache UUID) for files that must not outlive a driver update.
func (d DeviceInfo) CacheKey() string {
	return fmt.Sprintf("%04x-%04x-%x", d.VendorID, d.DeviceID, d.PipelineCacheUUID)
}

// LoopBudget is how many loop iterations one invocation of a compute
// shader runs, all its loops together, before the driver silently ends its
// loops, or 0 where no such limit is known. llvmpipe (lavapipe) counts
// every loop iteration of an invocation against one limiter of 65,535
// (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS) and drops the work past it:
// measured on Mesa 22.3.6; Mesa 26.1 computed the same long loops whole.
// Versions in between are taken to have it. The planner keeps every
// kernel's loops within the budget (SEMANTICS.md §14).
func (d DeviceInfo) LoopBudget() int {
	if d.DriverID != DriverIDLavapipe {
		return 0
	}
	if major, ok := mesaMajor(d.DriverInfo); ok && major >= 26 {
		return 0
	}
	return 65535
}

// mesaMajor reads Mesa's major version from a driver info string such as
// "Mesa 22.3.6 (LLVM 15.0.6)".
func mesaMajor(info string) (int, bool) {
	var major int
	i := strings.Index(info, "Mesa ")
	if i < 0 {
		return 0, false
	}
	if _, err := fmt.Sscanf(info[i+len("Mesa "):], "%d", &major); err != nil {
		return 0, false
	}
	return major, true
}
