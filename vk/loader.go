package vk

/*
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

// The loader's vkGetInstanceProcAddr, which the OS's own part
// (loader_unix.go, loader_windows.go) found.
static PFN_vkGetInstanceProcAddr vkattn_gipa;

static void vkattn_set_gipa(void *p) { vkattn_gipa = (PFN_vkGetInstanceProcAddr)p; }

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
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
	"golang.org/x/sys/cpu"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// libraryEnv names a Vulkan loader to use instead of the OS's usual one.
const libraryEnv = "VKATTN_VULKAN_LIBRARY"

// loaderCandidates are the libraries load tries on goos, in order: the
// one env names alone when it is set (a name given on purpose that does
// not load is an error, not a reason to take another), else the OS's
// runtime loader. Linux's is libvulkan.so.1 (the runtime package's;
// libvulkan.so comes only with -dev packages); macOS's is the Vulkan SDK's
// or Homebrew's loader, else MoltenVK itself, which is a Vulkan library
// of its own.
func loaderCandidates(goos, env string) []string {
	if env != "" {
		return []string{env}
	}
	switch goos {
	case "windows":
		return []string{"vulkan-1.dll"}
	case "darwin", "ios":
		return []string{"libvulkan.1.dylib", "libMoltenVK.dylib"}
	}
	return []string{"libvulkan.so.1"}
}

// loaderHint says how to get a Vulkan loader on goos.
func loaderHint(goos string) string {
	var hint string
	switch goos {
	case "windows":
		hint = "install your GPU vendor's driver, which installs vulkan-1.dll"
	case "darwin", "ios":
		hint = "install the Vulkan SDK or MoltenVK (Homebrew: brew install vulkan-loader molten-vk)"
	default:
		hint = "install the Vulkan loader and a driver (Debian/Ubuntu: apt-get install libvulkan1 mesa-vulkan-drivers)"
	}
	return hint + ", or set " + libraryEnv + " to the loader library's path"
}

// loaderError is load's failure: no candidate library could be opened.
// It wraps ErrNoDriver.
type loaderError struct {
	tried []string // each library tried, with why it failed
	env   string   // VKATTN_VULKAN_LIBRARY, which named the one tried, or ""
	goos  string
}

func (e *loaderError) Error() string {
	if e.env != "" {
		return fmt.Sprintf("vk: cannot load the Vulkan loader %s names: tried %s; it must name a Vulkan loader library (unset it to look for %s)",
			libraryEnv, strings.Join(e.tried, "; "), strings.Join(loaderCandidates(e.goos, ""), " or "))
	}
	return fmt.Sprintf("vk: cannot load a Vulkan loader: tried %s; %s", strings.Join(e.tried, "; "), loaderHint(e.goos))
}

func (e *loaderError) Unwrap() error { return ErrNoDriver }

// openLoader opens the first of the libraries loaderCandidates(goos, env)
// names that loads and has vkGetInstanceProcAddr, and returns that
// function.
func openLoader(goos, env string) (unsafe.Pointer, error) {
	e := &loaderError{env: env, goos: goos}
	for _, name := range loaderCandidates(goos, env) {
		gipa, err := openLibrary(name)
		if err == nil {
			return gipa, nil
		}
		e.tried = append(e.tried, fmt.Sprintf("%s (%v)", name, err))
	}
	return nil, e
}

// load opens the Vulkan loader (loaderCandidates) and initialises
// vulkan-go's global entry points. It runs once per process; later calls
// return the first result.
func load() error {
	loadOnce.Do(func() {
		widenLavapipe()
		gipa, err := openLoader(runtime.GOOS, os.Getenv(libraryEnv))
		if err != nil {
			loadErr = err
			return
		}
		C.vkattn_set_gipa(gipa)
		procAddr = gipa
		vulkan.SetGetInstanceProcAddr(gipa)
		if err := vulkan.Init(); err != nil {
			loadErr = fmt.Errorf("vk: vulkan-go Init: %w", err)
		}
	})
	return loadErr
}

// LavapipeWidthEnv is the variable by which llvmpipe, lavapipe's code
// generator, takes its vector width in bits (its subgroups are that many
// 32-bit lanes).
const LavapipeWidthEnv = "LP_NATIVE_VECTOR_WIDTH"

// widenLavapipe asks lavapipe for 512-bit vectors (16-lane subgroups) on a
// CPU with AVX-512 where the process has not chosen a width: llvmpipe
// keeps to 256 bits there unless told, and vkattn's kernels ran prefill
// 1.45-1.7x and the backward 1.5x faster at 512 (BENCHMARKS.md, "Vector
// width"). The driver reads the variable once, when it first creates a
// device (vkEnumeratePhysicalDevices), so it is set before the loader is
// opened and left set; other drivers ignore it. Where the driver reads a
// copy of the environment taken at start (the C runtime of a Windows
// DLL) this changes nothing, and the plans follow the width the device
// reports either way.
func widenLavapipe() {
	if _, set := os.LookupEnv(LavapipeWidthEnv); set || !cpuHasAVX512() {
		return
	}
	_ = os.Setenv(LavapipeWidthEnv, "512") // only fails for malformed names
}

// cpuHasAVX512 reports the AVX-512 subsets llvmpipe's 512-bit code needs
// for its float, integer and mask operations (F, BW, DQ, VL: every
// AVX-512 CPU since Skylake-SP).
func cpuHasAVX512() bool {
	return cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL
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
