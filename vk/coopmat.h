// VK_KHR_cooperative_matrix's structs, declared here because the system's
// Vulkan headers (1.3.239) predate the extension: vk/coopmat.go queries
// the features and shapes, vk/calls.go enables the feature.
#ifndef VKATTN_COOPMAT_H
#define VKATTN_COOPMAT_H

#include <vulkan/vulkan.h>

#define VKATTN_STYPE_COOPMAT_FEATURES 1000506000   // ..._PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
#define VKATTN_STYPE_COOPMAT_PROPERTIES 1000506001 // ..._COOPERATIVE_MATRIX_PROPERTIES_KHR

// VkPhysicalDeviceCooperativeMatrixFeaturesKHR
typedef struct {
	VkStructureType sType;
	void *pNext;
	VkBool32 cooperativeMatrix;
	VkBool32 cooperativeMatrixRobustBufferAccess;
} vkattn_coopmat_features;

// VkCooperativeMatrixPropertiesKHR
typedef struct {
	VkStructureType sType;
	void *pNext;
	uint32_t MSize, NSize, KSize;
	uint32_t AType, BType, CType, ResultType;
	VkBool32 saturatingAccumulation;
	uint32_t scope;
} vkattn_coopmat_properties;

#endif
