package vk

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

static void *vkattn_lib;
static PFN_vkGetInstanceProcAddr vkattn_gipa;

// vkattn_load opens the runtime loader (libvulkan.so.1, which the runtime
// package ships; libvulkan.so comes only with -dev packages).
static void *vkattn_load(char **err) {
	if (vkattn_gipa) return (void *)vkattn_gipa;
	vkattn_lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!vkattn_lib) { *err = dlerror(); return NULL; }
	vkattn_gipa = (PFN_vkGetInstanceProcAddr)dlsym(vkattn_lib, "vkGetInstanceProcAddr");
	if (!vkattn_gipa) { *err = "libvulkan.so.1 has no vkGetInstanceProcAddr"; return NULL; }
	return (void *)vkattn_gipa;
}

typedef struct {
	uint32_t driverID;
	char driverName[VK_MAX_DRIVER_NAME_SIZE];
	char driverInfo[VK_MAX_DRIVER_INFO_SIZE];
	uint32_t subgroupSize;
	uint32_t subgroupShuffle;
	uint32_t hasDriverProps;
	uint32_t minSubgroupSize, maxSubgroupSize;
	uint32_t sizeControl;   // subgroupSizeControl, with compute among the required-size stages
	uint32_t fullSubgroups; // computeFullSubgroups
} vkattn_extra_props;

// vkattn_query_extra reads the Vulkan 1.1/1.2 properties the 1.1.88 headers
// of vulkan-go cannot express (driver ID and name, subgroup size and
// shuffles) and, where the device offers VK_EXT_subgroup_size_control
// (sizeControlExt), its subgroup size range and features.
static int vkattn_query_extra(void *instance, void *pd, uint32_t apiVersion, int sizeControlExt, vkattn_extra_props *out) {
	memset(out, 0, sizeof(*out));
	PFN_vkGetPhysicalDeviceProperties2 get = (PFN_vkGetPhysicalDeviceProperties2)
		vkattn_gipa((VkInstance)instance, "vkGetPhysicalDeviceProperties2");
	if (!get) return -1;
	VkPhysicalDeviceDriverProperties driver = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
	VkPhysicalDeviceSubgroupProperties subgroup = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
	VkPhysicalDeviceProperties2 props = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
	props.pNext = &subgroup;
	if (apiVersion >= VK_API_VERSION_1_2) {
		subgroup.pNext = &driver;
		out->hasDriverProps = 1;
	}
	VkPhysicalDeviceSubgroupSizeControlPropertiesEXT sizes = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
	if (sizeControlExt) {
		sizes.pNext = props.pNext;
		props.pNext = &sizes;
	}
	get((VkPhysicalDevice)pd, &props);
	out->subgroupSize = subgroup.subgroupSize;
	out->minSubgroupSize = out->maxSubgroupSize = subgroup.subgroupSize;
	if (sizeControlExt) {
		PFN_vkGetPhysicalDeviceFeatures2 feat = (PFN_vkGetPhysicalDeviceFeatures2)
			vkattn_gipa((VkInstance)instance, "vkGetPhysicalDeviceFeatures2");
		if (!feat) return -1;
		VkPhysicalDeviceSubgroupSizeControlFeaturesEXT f = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
		VkPhysicalDeviceFeatures2 features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
		features.pNext = &f;
		feat((VkPhysicalDevice)pd, &features);
		out->minSubgroupSize = sizes.minSubgroupSize;
		out->maxSubgroupSize = sizes.maxSubgroupSize;
		out->sizeControl = f.subgroupSizeControl && (sizes.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
		out->fullSubgroups = f.computeFullSubgroups;
	}
	out->subgroupShuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
		(subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
	if (out->hasDriverProps) {
		out->driverID = driver.driverID;
		memcpy(out->driverName, driver.driverName, sizeof(out->driverName));
		memcpy(out->driverInfo, driver.driverInfo, sizeof(out->driverInfo));
	}
	return 0;
}

// vkattn_heap_room fills room[i] with what heap i's budget leaves
// (VK_EXT_memory_budget: heapBudget - heapUsage, 0 when over) and *n with
// the heap count.
static int vkattn_heap_room(void *instance, void *pd, uint64_t *room, uint32_t *n) {
	PFN_vkGetPhysicalDeviceMemoryProperties2 get = (PFN_vkGetPhysicalDeviceMemoryProperties2)
		vkattn_gipa((VkInstance)instance, "vkGetPhysicalDeviceMemoryProperties2");
	if (!get) return -1;
	VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
	VkPhysicalDeviceMemoryProperties2 props = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
	props.pNext = &budget;
	get((VkPhysicalDevice)pd, &props);
	*n = props.memoryProperties.memoryHeapCount;
	for (uint32_t i = 0; i < *n && i < VK_MAX_MEMORY_HEAPS; i++) {
		room[i] = budget.heapBudget[i] > budget.heapUsage[i] ? budget.heapBudget[i] - budget.heapUsage[i] : 0;
	}
	return 0;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// load opens libvulkan.so.1 and initialises vulkan-go's global entry points.
// It runs once per process; later calls return the first result.
func load() error {
	loadOnce.Do(func() {
		var cerr *C.char
		gipa := C.vkattn_load(&cerr)
		if gipa == nil {
			loadErr = fmt.Errorf("vk: cannot load the Vulkan loader libvulkan.so.1 (install libvulkan1 and a driver such as mesa-vulkan-drivers): %s", C.GoString(cerr))
			return
		}
		procAddr = gipa
		vulkan.SetGetInstanceProcAddr(gipa)
		if err := vulkan.Init(); err != nil {
			loadErr = fmt.Errorf("vk: vulkan-go Init: %w", err)
		}
	})
	return loadErr
}

type extraProps struct {
	driverID   uint32
	driverName string
	driverInfo string
	subgroup   uint32
	shuffle    bool
	// Subgroup size control (VK_EXT_subgroup_size_control).
	minSubgroup, maxSubgroup uint32
	sizeControl, fullGroups  bool
}

// queryHeapRoom is what each memory heap's budget leaves now, from
// VK_EXT_memory_budget (the device must offer it).
func queryHeapRoom(inst vulkan.Instance, pd vulkan.PhysicalDevice) ([]uint64, error) {
	var room [C.VK_MAX_MEMORY_HEAPS]C.uint64_t
	var n C.uint32_t
	if C.vkattn_heap_room(unsafe.Pointer(inst), unsafe.Pointer(pd), &room[0], &n) != 0 {
		return nil, fmt.Errorf("vk: vkGetPhysicalDeviceMemoryProperties2 unavailable")
	}
	out := make([]uint64, min(int(n), len(room)))
	for i := range out {
		out[i] = uint64(room[i])
	}
	return out, nil
}

func queryExtra(inst vulkan.Instance, pd vulkan.PhysicalDevice, apiVersion uint32, sizeControlExt bool) (extraProps, error) {
	var out C.vkattn_extra_props
	ext := C.int(0)
	if sizeControlExt {
		ext = 1
	}
	if C.vkattn_query_extra(unsafe.Pointer(inst), unsafe.Pointer(pd), C.uint32_t(apiVersion), ext, &out) != 0 {
		return extraProps{}, fmt.Errorf("vk: vkGetPhysicalDeviceProperties2 unavailable")
	}
	return extraProps{
		driverID:    uint32(out.driverID),
		driverName:  C.GoString(&out.driverName[0]),
		driverInfo:  C.GoString(&out.driverInfo[0]),
		subgroup:    uint32(out.subgroupSize),
		shuffle:     out.subgroupShuffle != 0,
		minSubgroup: uint32(out.minSubgroupSize),
		maxSubgroup: uint32(out.maxSubgroupSize),
		sizeControl: out.sizeControl != 0,
		fullGroups:  out.fullSubgroups != 0,
	}, nil
}

// cBytes copies b into C memory, for the pointers vulkan-go passes through
// unconverted (specialization data, pipeline cache data). Free with C.free.
func cBytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return C.CBytes(b)
}

func cFree(p unsafe.Pointer) {
	if p != nil {
		C.free(p)
	}
}

func unsafePointer(v *uint64) unsafe.Pointer { return unsafe.Pointer(v) }
