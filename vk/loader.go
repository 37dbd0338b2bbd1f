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
} vkattn_extra_props;

// vkattn_query_extra reads the Vulkan 1.1/1.2 properties the 1.1.88 headers
// of vulkan-go cannot express (driver ID and name, subgroup size and shuffles).
static int vkattn_query_extra(void *instance, void *pd, uint32_t apiVersion, vkattn_extra_props *out) {
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
	get((VkPhysicalDevice)pd, &props);
	out->subgroupSize = subgroup.subgroupSize;
	out->subgroupShuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
		(subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
	if (out->hasDriverProps) {
		out->driverID = driver.driverID;
		memcpy(out->driverName, driver.driverName, sizeof(out->driverName));
		memcpy(out->driverInfo, driver.driverInfo, sizeof(out->driverInfo));
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
}

func queryExtra(inst vulkan.Instance, pd vulkan.PhysicalDevice, apiVersion uint32) (extraProps, error) {
	var out C.vkattn_extra_props
	if C.vkattn_query_extra(unsafe.Pointer(inst), unsafe.Pointer(pd), C.uint32_t(apiVersion), &out) != 0 {
		return extraProps{}, fmt.Errorf("vk: vkGetPhysicalDeviceProperties2 unavailable")
	}
	return extraProps{
		driverID:   uint32(out.driverID),
		driverName: C.GoString(&out.driverName[0]),
		driverInfo: C.GoString(&out.driverInfo[0]),
		subgroup:   uint32(out.subgroupSize),
		shuffle:    out.subgroupShuffle != 0,
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
