package vk

// VK_KHR_cooperative_matrix: the device's matrix shapes, queried with
// the structs of coopmat.h (the system's Vulkan headers predate the
// extension).

/*
#include <string.h>
#include "coopmat.h"

typedef VkResult (*vkattn_pfn_coopmat_properties)(VkPhysicalDevice, uint32_t *, vkattn_coopmat_properties *);

// vkattn_coopmat_query reads whether pd offers the cooperativeMatrix,
// shaderFloat16, vulkanMemoryModel and vulkanMemoryModelDeviceScope
// features (the extensions must be offered; the caller checks) and up to
// *n of its matrix properties into out, setting *n to how many it read.
// VK_INCOMPLETE is not an error: out was full.
static VkResult vkattn_coopmat_query(void *gipa, VkInstance inst, VkPhysicalDevice pd, int *usable,
		uint32_t *n, vkattn_coopmat_properties *out) {
	PFN_vkGetInstanceProcAddr proc = (PFN_vkGetInstanceProcAddr)gipa;
	PFN_vkGetPhysicalDeviceFeatures2 features = (PFN_vkGetPhysicalDeviceFeatures2)proc(inst, "vkGetPhysicalDeviceFeatures2");
	vkattn_pfn_coopmat_properties props = (vkattn_pfn_coopmat_properties)
		proc(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
	*usable = 0;
	if (!features || !props) {
		*n = 0;
		return VK_SUCCESS;
	}
	vkattn_coopmat_features cm = {(VkStructureType)VKATTN_STYPE_COOPMAT_FEATURES};
	VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR};
	f16.pNext = &cm;
	VkPhysicalDeviceVulkanMemoryModelFeaturesKHR model = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR};
	model.pNext = &f16;
	VkPhysicalDeviceFeatures2 f = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
	f.pNext = &model;
	features(pd, &f);
	// Device-scope atomics (q8_store.comp) under the memory model need
	// vulkanMemoryModelDeviceScope too.
	if (!cm.cooperativeMatrix || !f16.shaderFloat16 || !model.vulkanMemoryModel || !model.vulkanMemoryModelDeviceScope) {
		*n = 0;
		return VK_SUCCESS;
	}
	*usable = 1;
	for (uint32_t i = 0; i < *n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].sType = (VkStructureType)VKATTN_STYPE_COOPMAT_PROPERTIES;
	}
	VkResult r = props(pd, n, out);
	return r == VK_INCOMPLETE ? VK_SUCCESS : r;
}
*/
import "C"

import (
	"slices"
	"unsafe"

	"github.com/vkattn/vkattn/core"
	"github.com/vulkan-go/vulkan"
)

// The extensions the cooperative-matrix kernels need: the matrices,
// float16 arithmetic, and the Vulkan memory model (GLSL's cooperative
// matrices compile to it).
var coopmatExtensions = []string{"VK_KHR_cooperative_matrix", "VK_KHR_shader_float16_int8", "VK_KHR_vulkan_memory_model"}

// maxMatrices bounds how many matrix properties are read: drivers report
// a handful.
const maxMatrices = 64

// cooperativeMatrices are pd's matrix shapes when it offers the extension
// and the features the cooperative-matrix kernels need (exts are its
// extensions); nil otherwise.
func cooperativeMatrices(inst vulkan.Instance, pd vulkan.PhysicalDevice, exts []string) ([]core.CooperativeMatrix, error) {
	for _, e := range coopmatExtensions {
		if !slices.Contains(exts, e) {
			return nil, nil
		}
	}
	props := make([]C.vkattn_coopmat_properties, maxMatrices)
	n := C.uint32_t(len(props))
	var usable C.int
	err := call("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", func() vulkan.Result {
		return result(C.vkattn_coopmat_query(procAddr,
			C.VkInstance(unsafe.Pointer(inst)), C.VkPhysicalDevice(unsafe.Pointer(pd)), &usable, &n, &props[0]))
	})
	if err != nil || usable == 0 {
		return nil, err
	}
	out := []core.CooperativeMatrix{}
	for _, p := range props[:n] {
		out = append(out, core.CooperativeMatrix{
			M: int(p.MSize), N: int(p.NSize), K: int(p.KSize),
			A: core.MatrixType(p.AType), B: core.MatrixType(p.BType), C: core.MatrixType(p.CType), Result: core.MatrixType(p.ResultType),
			SaturatingAccumulation: p.saturatingAccumulation != 0, Scope: core.MatrixScope(p.scope),
		})
	}
	return out, nil
}
