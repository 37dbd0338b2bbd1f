package vk

// Vulkan calls whose create infos hold arrays or nested structs are made
// here, through C shims that build those structs on the C stack. The
// arrays they point to are built in Go when they hold no pointers (cgo pins
// them for the call), and in C memory by the shim when they do
// (vkattn_update_set's writes point to its buffer and image infos).
//
// vulkan-go converts such arguments into C memory that it frees from a Go
// finalizer, and the finalizer is attached to a variable that is unreachable
// as soon as the conversion returns: a garbage collection during the call
// (lavapipe compiles a pipeline for seconds inside vkCreateComputePipelines)
// frees the create info while the driver and the validation layer still read
// it. That crashed the test suite intermittently (TestCallsSurviveGC).
// Go memory passed as an argument here is pinned by cgo for the call.

/*
#include <stdlib.h>
#include <vulkan/vulkan.h>
#include "coopmat.h"

typedef struct {
	PFN_vkCreateShaderModule createShaderModule;
	PFN_vkCreateDescriptorSetLayout createDescriptorSetLayout;
	PFN_vkCreatePipelineLayout createPipelineLayout;
	PFN_vkCreateComputePipelines createComputePipelines;
	PFN_vkCreateDescriptorPool createDescriptorPool;
	PFN_vkAllocateDescriptorSets allocateDescriptorSets;
	PFN_vkUpdateDescriptorSets updateDescriptorSets;
	PFN_vkQueueSubmit queueSubmit;
	PFN_vkCmdPipelineBarrier cmdPipelineBarrier;
	PFN_vkCmdCopyBuffer cmdCopyBuffer;
} vkattn_device_calls;

static PFN_vkVoidFunction vkattn_proc(void *gipa, VkInstance inst, const char *name) {
	return ((PFN_vkGetInstanceProcAddr)gipa)(inst, name);
}

static VkResult vkattn_enumerate_layers(void *gipa, uint32_t *n, VkLayerProperties *props) {
	PFN_vkEnumerateInstanceLayerProperties f = (PFN_vkEnumerateInstanceLayerProperties)
		vkattn_proc(gipa, NULL, "vkEnumerateInstanceLayerProperties");
	if (!f) return VK_ERROR_INITIALIZATION_FAILED;
	return f(n, props);
}

static VkResult vkattn_create_instance(void *gipa, uint32_t apiVersion, uint32_t flags, const char *const *layers, uint32_t nLayers,
		const char *const *extensions, uint32_t nExtensions, VkInstance *out) {
	PFN_vkCreateInstance f = (PFN_vkCreateInstance)vkattn_proc(gipa, NULL, "vkCreateInstance");
	if (!f) return VK_ERROR_INITIALIZATION_FAILED;
	VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
	app.pApplicationName = "vkattn";
	app.pEngineName = "vkattn";
	app.apiVersion = apiVersion;
	VkInstanceCreateInfo info = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
	info.flags = flags;
	info.pApplicationInfo = &app;
	info.enabledLayerCount = nLayers;
	info.ppEnabledLayerNames = layers;
	info.enabledExtensionCount = nExtensions;
	info.ppEnabledExtensionNames = extensions;
	return f(&info, NULL, out);
}

static VkResult vkattn_enumerate_instance_extensions(void *gipa, uint32_t *n, VkExtensionProperties *props) {
	PFN_vkEnumerateInstanceExtensionProperties f = (PFN_vkEnumerateInstanceExtensionProperties)
		vkattn_proc(gipa, NULL, "vkEnumerateInstanceExtensionProperties");
	if (!f) return VK_ERROR_INITIALIZATION_FAILED;
	return f(NULL, n, props);
}

static VkResult vkattn_enumerate_device_extensions(void *gipa, VkInstance inst, VkPhysicalDevice pd,
		uint32_t *n, VkExtensionProperties *props) {
	PFN_vkEnumerateDeviceExtensionProperties f = (PFN_vkEnumerateDeviceExtensionProperties)
		vkattn_proc(gipa, inst, "vkEnumerateDeviceExtensionProperties");
	if (!f) return VK_ERROR_INITIALIZATION_FAILED;
	return f(pd, NULL, n, props);
}

static VkResult vkattn_queue_families(void *gipa, VkInstance inst, VkPhysicalDevice pd,
		uint32_t *n, VkQueueFamilyProperties *props) {
	PFN_vkGetPhysicalDeviceQueueFamilyProperties f = (PFN_vkGetPhysicalDeviceQueueFamilyProperties)
		vkattn_proc(gipa, inst, "vkGetPhysicalDeviceQueueFamilyProperties");
	if (!f) return VK_ERROR_INITIALIZATION_FAILED;
	f(pd, n, props);
	return VK_SUCCESS;
}

// sizeControl > 0 enables subgroupSizeControl (and, if 2, computeFullSubgroups)
// of VK_EXT_subgroup_size_control, which must be among the extensions;
// coopmat enables cooperativeMatrix, shaderFloat16, vulkanMemoryModel and
// its device scope, whose extensions must be among them too.
static VkResult vkattn_create_device(void *gipa, VkInstance inst, VkPhysicalDevice pd,
		uint32_t family, const char *const *extensions, uint32_t nExtensions, int sizeControl, int coopmat, VkDevice *out) {
	PFN_vkCreateDevice f = (PFN_vkCreateDevice)vkattn_proc(gipa, inst, "vkCreateDevice");
	if (!f) return VK_ERROR_INITIALIZATION_FAILED;
	float priority = 1.0f;
	VkDeviceQueueCreateInfo queue = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
	queue.queueFamilyIndex = family;
	queue.queueCount = 1;
	queue.pQueuePriorities = &priority;
	VkDeviceCreateInfo info = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
	info.queueCreateInfoCount = 1;
	info.pQueueCreateInfos = &queue;
	info.enabledExtensionCount = nExtensions;
	info.ppEnabledExtensionNames = extensions;
	VkPhysicalDeviceSubgroupSizeControlFeaturesEXT sizes = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
	if (sizeControl > 0) {
		sizes.subgroupSizeControl = VK_TRUE;
		sizes.computeFullSubgroups = sizeControl > 1 ? VK_TRUE : VK_FALSE;
		sizes.pNext = (void *)info.pNext;
		info.pNext = &sizes;
	}
	vkattn_coopmat_features cm = {(VkStructureType)VKATTN_STYPE_COOPMAT_FEATURES};
	VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR};
	VkPhysicalDeviceVulkanMemoryModelFeaturesKHR model = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR};
	if (coopmat) {
		cm.cooperativeMatrix = VK_TRUE;
		f16.shaderFloat16 = VK_TRUE;
		model.vulkanMemoryModel = VK_TRUE;
		model.vulkanMemoryModelDeviceScope = VK_TRUE; // device-scope atomics (q8_store.comp)
		model.pNext = &cm;
		f16.pNext = &model;
		cm.pNext = (void *)info.pNext;
		info.pNext = &f16;
	}
	return f(pd, &info, NULL, out);
}

// vkattn_gdpa is vkGetDeviceProcAddr, through which device-level entry
// points are resolved (here and in present.go), so calls go straight down
// the device's layer chain.
static PFN_vkGetDeviceProcAddr vkattn_gdpa(void *gipa, VkInstance inst) {
	return (PFN_vkGetDeviceProcAddr)vkattn_proc(gipa, inst, "vkGetDeviceProcAddr");
}

// vkattn_resolve_device fills c with the device-level entry points.
static int vkattn_resolve_device(PFN_vkGetDeviceProcAddr gdpa, VkDevice dev, vkattn_device_calls *c) {
	c->createShaderModule = (PFN_vkCreateShaderModule)gdpa(dev, "vkCreateShaderModule");
	c->createDescriptorSetLayout = (PFN_vkCreateDescriptorSetLayout)gdpa(dev, "vkCreateDescriptorSetLayout");
	c->createPipelineLayout = (PFN_vkCreatePipelineLayout)gdpa(dev, "vkCreatePipelineLayout");
	c->createComputePipelines = (PFN_vkCreateComputePipelines)gdpa(dev, "vkCreateComputePipelines");
	c->createDescriptorPool = (PFN_vkCreateDescriptorPool)gdpa(dev, "vkCreateDescriptorPool");
	c->allocateDescriptorSets = (PFN_vkAllocateDescriptorSets)gdpa(dev, "vkAllocateDescriptorSets");
	c->updateDescriptorSets = (PFN_vkUpdateDescriptorSets)gdpa(dev, "vkUpdateDescriptorSets");
	c->queueSubmit = (PFN_vkQueueSubmit)gdpa(dev, "vkQueueSubmit");
	c->cmdPipelineBarrier = (PFN_vkCmdPipelineBarrier)gdpa(dev, "vkCmdPipelineBarrier");
	c->cmdCopyBuffer = (PFN_vkCmdCopyBuffer)gdpa(dev, "vkCmdCopyBuffer");
	return c->createShaderModule && c->createDescriptorSetLayout && c->createPipelineLayout &&
		c->createComputePipelines && c->createDescriptorPool && c->allocateDescriptorSets &&
		c->updateDescriptorSets && c->queueSubmit && c->cmdPipelineBarrier && c->cmdCopyBuffer ? 0 : -1;
}

static VkResult vkattn_create_shader_module(const vkattn_device_calls *c, VkDevice dev,
		const uint32_t *code, size_t size, VkShaderModule *out) {
	VkShaderModuleCreateInfo info = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
	info.codeSize = size;
	info.pCode = code;
	return c->createShaderModule(dev, &info, NULL, out);
}

static VkResult vkattn_create_set_layout(const vkattn_device_calls *c, VkDevice dev,
		const VkDescriptorSetLayoutBinding *bindings, uint32_t n, VkDescriptorSetLayout *out) {
	VkDescriptorSetLayoutCreateInfo info = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
	info.bindingCount = n;
	info.pBindings = bindings;
	return c->createDescriptorSetLayout(dev, &info, NULL, out);
}

static VkResult vkattn_create_pipeline_layout(const vkattn_device_calls *c, VkDevice dev,
		VkDescriptorSetLayout set, uint32_t pushSize, VkPipelineLayout *out) {
	VkPushConstantRange push = {VK_SHADER_STAGE_COMPUTE_BIT, 0, pushSize};
	VkPipelineLayoutCreateInfo info = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
	info.setLayoutCount = 1;
	info.pSetLayouts = &set;
	if (pushSize > 0) {
		info.pushConstantRangeCount = 1;
		info.pPushConstantRanges = &push;
	}
	return c->createPipelineLayout(dev, &info, NULL, out);
}

// entries[i] places specialization constant entries[i].constantID in spec.
// subgroupSize > 0 requires that subgroup size; full requires full
// subgroups (both need the features of VK_EXT_subgroup_size_control
// enabled).
static VkResult vkattn_create_compute_pipeline(const vkattn_device_calls *c, VkDevice dev,
		VkPipelineCache cache, VkShaderModule module, VkPipelineLayout layout,
		const VkSpecializationMapEntry *entries, const int32_t *spec, uint32_t n,
		uint32_t subgroupSize, int full, VkPipeline *out) {
	VkSpecializationInfo specInfo = {n, entries, 4 * (size_t)n, spec};
	VkComputePipelineCreateInfo info = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
	info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
	info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
	info.stage.module = module;
	info.stage.pName = "main";
	if (n > 0) info.stage.pSpecializationInfo = &specInfo;
	VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT required = {
		VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT};
	if (subgroupSize > 0) {
		required.requiredSubgroupSize = subgroupSize;
		info.stage.pNext = &required;
	}
	if (full) info.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT;
	info.layout = layout;
	return c->createComputePipelines(dev, cache, 1, &info, NULL, out);
}

// A pool for exactly one set.
static VkResult vkattn_create_descriptor_pool(const vkattn_device_calls *c, VkDevice dev,
		const VkDescriptorPoolSize *sizes, uint32_t n, VkDescriptorPool *out) {
	VkDescriptorPoolCreateInfo info = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
	info.maxSets = 1;
	info.poolSizeCount = n;
	info.pPoolSizes = sizes;
	return c->createDescriptorPool(dev, &info, NULL, out);
}

static VkResult vkattn_allocate_set(const vkattn_device_calls *c, VkDevice dev,
		VkDescriptorPool pool, VkDescriptorSetLayout layout, VkDescriptorSet *out) {
	VkDescriptorSetAllocateInfo info = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
	info.descriptorPool = pool;
	info.descriptorSetCount = 1;
	info.pSetLayouts = &layout;
	return c->allocateDescriptorSets(dev, &info, out);
}

// vkattn_binding is one descriptor write: a storage image (in the general
// layout) when image is set, a texel view when view is set, else a buffer
// range.
typedef struct {
	uint32_t type;
	VkBuffer buffer;
	VkDeviceSize offset, range;
	VkBufferView view;
	VkImageView image;
} vkattn_binding;

// Binding i of set gets b[i].
static VkResult vkattn_update_set(const vkattn_device_calls *c, VkDevice dev, VkDescriptorSet set,
		const vkattn_binding *b, uint32_t n) {
	VkWriteDescriptorSet *writes = calloc(n ? n : 1, sizeof(*writes));
	VkDescriptorBufferInfo *infos = calloc(n ? n : 1, sizeof(*infos));
	VkDescriptorImageInfo *images = calloc(n ? n : 1, sizeof(*images));
	if (!writes || !infos || !images) {
		free(writes);
		free(infos);
		free(images);
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	for (uint32_t i = 0; i < n; i++) {
		writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
		writes[i].dstSet = set;
		writes[i].dstBinding = i;
		writes[i].descriptorCount = 1;
		writes[i].descriptorType = (VkDescriptorType)b[i].type;
		if (b[i].image != VK_NULL_HANDLE) {
			images[i].imageView = b[i].image;
			images[i].imageLayout = VK_IMAGE_LAYOUT_GENERAL;
			writes[i].pImageInfo = &images[i];
		} else if (b[i].view != VK_NULL_HANDLE) {
			writes[i].pTexelBufferView = &b[i].view;
		} else {
			infos[i].buffer = b[i].buffer;
			infos[i].offset = b[i].offset;
			infos[i].range = b[i].range;
			writes[i].pBufferInfo = &infos[i];
		}
	}
	c->updateDescriptorSets(dev, n, writes, 0, NULL);
	free(writes);
	free(infos);
	free(images);
	return VK_SUCCESS;
}

static VkResult vkattn_submit(const vkattn_device_calls *c, VkQueue queue, VkCommandBuffer cmd, VkFence fence) {
	VkSubmitInfo info = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
	info.commandBufferCount = 1;
	info.pCommandBuffers = &cmd;
	return c->queueSubmit(queue, 1, &info, fence);
}

static void vkattn_barrier(const vkattn_device_calls *c, VkCommandBuffer cmd,
		VkPipelineStageFlags srcStages, VkPipelineStageFlags dstStages,
		VkAccessFlags srcAccess, VkAccessFlags dstAccess) {
	VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
	barrier.srcAccessMask = srcAccess;
	barrier.dstAccessMask = dstAccess;
	c->cmdPipelineBarrier(cmd, srcStages, dstStages, 0, 1, &barrier, 0, NULL, 0, NULL);
}

static void vkattn_copy(const vkattn_device_calls *c, VkCommandBuffer cmd, VkBuffer src, VkBuffer dst,
		VkDeviceSize srcOffset, VkDeviceSize dstOffset, VkDeviceSize size) {
	VkBufferCopy region = {srcOffset, dstOffset, size};
	c->cmdCopyBuffer(cmd, src, dst, 1, &region);
}

static void vkattn_copy_regions(const vkattn_device_calls *c, VkCommandBuffer cmd, VkBuffer src, VkBuffer dst,
		uint32_t count, const VkBufferCopy *regions) {
	c->cmdCopyBuffer(cmd, src, dst, count, regions);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// procAddr is the loader's vkGetInstanceProcAddr, set by load.
var procAddr unsafe.Pointer

// deviceCalls are the device-level entry points the shims call, and
// vkGetDeviceProcAddr, which resolved them (present.go resolves more).
type deviceCalls struct {
	c    C.vkattn_device_calls
	gdpa C.PFN_vkGetDeviceProcAddr
}

func result(r C.VkResult) vulkan.Result { return vulkan.Result(r) }

// enumerateLayers lists the names of the installed instance layers.
func enumerateLayers() ([]string, error) {
	var n C.uint32_t
	if err := call("vkEnumerateInstanceLayerProperties", func() vulkan.Result { return result(C.vkattn_enumerate_layers(procAddr, &n, nil)) }); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	props := make([]C.VkLayerProperties, n)
	if err := call("vkEnumerateInstanceLayerProperties", func() vulkan.Result { return result(C.vkattn_enumerate_layers(procAddr, &n, &props[0])) }); err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = C.GoString(&props[i].layerName[0])
	}
	return names, nil
}

// cStrings copies names into a C array of C strings; free releases both.
func cStrings(names []string) (**C.char, C.uint32_t, func()) {
	if len(names) == 0 {
		return nil, 0, func() {}
	}
	arr := (*[1 << 20]*C.char)(C.malloc(C.size_t(len(names)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))[:len(names):len(names)]
	for i, n := range names {
		arr[i] = C.CString(n)
	}
	return &arr[0], C.uint32_t(len(names)), func() {
		for _, p := range arr {
			C.free(unsafe.Pointer(p))
		}
		C.free(unsafe.Pointer(&arr[0]))
	}
}

// createInstance creates an instance for apiVersion with the given
// VkInstanceCreateFlags, layers and extensions.
func createInstance(apiVersion, flags uint32, layers, extensions []string) (vulkan.Instance, error) {
	cLayers, nLayers, freeLayers := cStrings(layers)
	defer freeLayers()
	cExts, nExts, freeExts := cStrings(extensions)
	defer freeExts()
	var h C.VkInstance
	err := call("vkCreateInstance", func() vulkan.Result {
		return result(C.vkattn_create_instance(procAddr, C.uint32_t(apiVersion), C.uint32_t(flags), cLayers, nLayers, cExts, nExts, &h))
	})
	return vulkan.Instance(unsafe.Pointer(h)), err
}

// extensionNames turns what vkEnumerate*ExtensionProperties filled into names.
func extensionNames(props []C.VkExtensionProperties) []string {
	names := make([]string, len(props))
	for i := range props {
		names[i] = C.GoString(&props[i].extensionName[0])
	}
	return names
}

// instanceExtensions lists the instance extensions the loader and drivers offer.
func instanceExtensions() ([]string, error) {
	var n C.uint32_t
	if err := call("vkEnumerateInstanceExtensionProperties", func() vulkan.Result { return result(C.vkattn_enumerate_instance_extensions(procAddr, &n, nil)) }); err != nil || n == 0 {
		return nil, err
	}
	props := make([]C.VkExtensionProperties, n)
	if err := call("vkEnumerateInstanceExtensionProperties", func() vulkan.Result { return result(C.vkattn_enumerate_instance_extensions(procAddr, &n, &props[0])) }); err != nil {
		return nil, err
	}
	return extensionNames(props[:n]), nil
}

// deviceExtensions lists the extensions a physical device offers.
func deviceExtensions(inst vulkan.Instance, pd vulkan.PhysicalDevice) ([]string, error) {
	ci, cpd := C.VkInstance(unsafe.Pointer(inst)), C.VkPhysicalDevice(unsafe.Pointer(pd))
	var n C.uint32_t
	if err := call("vkEnumerateDeviceExtensionProperties", func() vulkan.Result { return result(C.vkattn_enumerate_device_extensions(procAddr, ci, cpd, &n, nil)) }); err != nil || n == 0 {
		return nil, err
	}
	props := make([]C.VkExtensionProperties, n)
	if err := call("vkEnumerateDeviceExtensionProperties", func() vulkan.Result {
		return result(C.vkattn_enumerate_device_extensions(procAddr, ci, cpd, &n, &props[0]))
	}); err != nil {
		return nil, err
	}
	return extensionNames(props[:n]), nil
}

// queueFamily is what device selection needs of a queue family.
type queueFamily struct {
	flags         vulkan.QueueFlagBits
	timestampBits uint32
	count         uint32 // queues the family offers
}

// queueFamilies returns the physical device's queue families.
func queueFamilies(inst vulkan.Instance, pd vulkan.PhysicalDevice) ([]queueFamily, error) {
	ci, cpd := C.VkInstance(unsafe.Pointer(inst)), C.VkPhysicalDevice(unsafe.Pointer(pd))
	var n C.uint32_t
	if err := call("vkGetPhysicalDeviceQueueFamilyProperties", func() vulkan.Result { return result(C.vkattn_queue_families(procAddr, ci, cpd, &n, nil)) }); err != nil || n == 0 {
		return nil, err
	}
	props := make([]C.VkQueueFamilyProperties, n)
	if err := call("vkGetPhysicalDeviceQueueFamilyProperties", func() vulkan.Result { return result(C.vkattn_queue_families(procAddr, ci, cpd, &n, &props[0])) }); err != nil {
		return nil, err
	}
	families := make([]queueFamily, n)
	for i := range families {
		families[i] = queueFamily{vulkan.QueueFlagBits(props[i].queueFlags), uint32(props[i].timestampValidBits), uint32(props[i].queueCount)}
	}
	return families, nil
}

// createDevice creates a device with one queue of family and the given
// extensions, and resolves the device-level entry points.
func createDevice(inst vulkan.Instance, pd vulkan.PhysicalDevice, family uint32, extensions []string, sizeControl int, coopmat bool) (vulkan.Device, *deviceCalls, error) {
	ci := C.VkInstance(unsafe.Pointer(inst))
	cExts, nExts, freeExts := cStrings(extensions)
	defer freeExts()
	var h C.VkDevice
	if err := call("vkCreateDevice", func() vulkan.Result {
		return result(C.vkattn_create_device(procAddr, ci, C.VkPhysicalDevice(unsafe.Pointer(pd)), C.uint32_t(family), cExts, nExts, C.int(sizeControl), cBool(coopmat), &h))
	}); err != nil {
		return nil, nil, err
	}
	dev := vulkan.Device(unsafe.Pointer(h))
	calls, err := resolveDevice(inst, dev)
	return dev, calls, err
}

// cBool is b as a C int.
func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// resolveDevice finds the device-level entry points of dev.
func resolveDevice(inst vulkan.Instance, dev vulkan.Device) (*deviceCalls, error) {
	calls := &deviceCalls{gdpa: C.vkattn_gdpa(procAddr, C.VkInstance(unsafe.Pointer(inst)))}
	if calls.gdpa == nil || C.vkattn_resolve_device(calls.gdpa, C.VkDevice(unsafe.Pointer(dev)), &calls.c) != 0 {
		return nil, fmt.Errorf("vk: vkGetDeviceProcAddr: a core Vulkan 1.0 command is missing")
	}
	return calls, nil
}

func (d *Device) createShaderModule(code []uint32) (vulkan.ShaderModule, error) {
	var h C.VkShaderModule
	err := d.call("vkCreateShaderModule", func() vulkan.Result {
		return result(C.vkattn_create_shader_module(&d.calls.c, d.cDevice(),
			(*C.uint32_t)(unsafe.Pointer(&code[0])), C.size_t(4*len(code)), &h))
	})
	return vulkan.ShaderModule(unsafe.Pointer(h)), err
}

// createSetLayout makes a layout of one descriptor of types[i] at binding
// i, visible to compute shaders.
func (d *Device) createSetLayout(types []uint32) (vulkan.DescriptorSetLayout, error) {
	bindings := make([]C.VkDescriptorSetLayoutBinding, len(types))
	for i, t := range types {
		bindings[i] = C.VkDescriptorSetLayoutBinding{binding: C.uint32_t(i), descriptorType: C.VkDescriptorType(t),
			descriptorCount: 1, stageFlags: C.VK_SHADER_STAGE_COMPUTE_BIT}
	}
	var h C.VkDescriptorSetLayout
	err := d.call("vkCreateDescriptorSetLayout", func() vulkan.Result {
		return result(C.vkattn_create_set_layout(&d.calls.c, d.cDevice(),
			first(bindings), C.uint32_t(len(bindings)), &h))
	})
	return vulkan.DescriptorSetLayout(unsafe.Pointer(h)), err
}

func (d *Device) createPipelineLayout(set vulkan.DescriptorSetLayout, pushSize uint32) (vulkan.PipelineLayout, error) {
	var h C.VkPipelineLayout
	err := d.call("vkCreatePipelineLayout", func() vulkan.Result {
		return result(C.vkattn_create_pipeline_layout(&d.calls.c, d.cDevice(),
			C.VkDescriptorSetLayout(unsafe.Pointer(set)), C.uint32_t(pushSize), &h))
	})
	return vulkan.PipelineLayout(unsafe.Pointer(h)), err
}

// createComputePipeline specializes each constant_id spec[i].ID to the
// 4-byte spec[i].Value.
func (d *Device) createComputePipeline(module vulkan.ShaderModule, layout vulkan.PipelineLayout, spec []SpecConstant, subgroupSize uint32, full bool) (vulkan.Pipeline, error) {
	fullFlag := C.int(0)
	if full {
		fullFlag = 1
	}
	entries := make([]C.VkSpecializationMapEntry, len(spec))
	values := make([]int32, len(spec))
	for i, s := range spec {
		entries[i] = C.VkSpecializationMapEntry{constantID: C.uint32_t(s.ID), offset: C.uint32_t(4 * i), size: 4}
		values[i] = s.Value
	}
	var h C.VkPipeline
	err := d.call("vkCreateComputePipelines", func() vulkan.Result {
		return result(C.vkattn_create_compute_pipeline(&d.calls.c, d.cDevice(),
			C.VkPipelineCache(unsafe.Pointer(d.cache)), C.VkShaderModule(unsafe.Pointer(module)),
			C.VkPipelineLayout(unsafe.Pointer(layout)), first(entries), (*C.int32_t)(unsafe.Pointer(first(values))), C.uint32_t(len(values)),
			C.uint32_t(subgroupSize), fullFlag, &h))
	})
	return vulkan.Pipeline(unsafe.Pointer(h)), err
}

// createDescriptorPool makes a pool for one set of the layout
// createSetLayout makes from types: a size of one descriptor per binding
// (Vulkan adds up the sizes of one type).
func (d *Device) createDescriptorPool(types []uint32) (vulkan.DescriptorPool, error) {
	sizes := make([]C.VkDescriptorPoolSize, len(types))
	for i, t := range types {
		sizes[i] = C.VkDescriptorPoolSize{_type: C.VkDescriptorType(t), descriptorCount: 1}
	}
	var h C.VkDescriptorPool
	err := d.call("vkCreateDescriptorPool", func() vulkan.Result {
		return result(C.vkattn_create_descriptor_pool(&d.calls.c, d.cDevice(),
			first(sizes), C.uint32_t(len(sizes)), &h))
	})
	return vulkan.DescriptorPool(unsafe.Pointer(h)), err
}

func (d *Device) allocateSet(pool vulkan.DescriptorPool, layout vulkan.DescriptorSetLayout) (vulkan.DescriptorSet, error) {
	var h C.VkDescriptorSet
	err := d.call("vkAllocateDescriptorSets", func() vulkan.Result {
		return result(C.vkattn_allocate_set(&d.calls.c, d.cDevice(),
			C.VkDescriptorPool(unsafe.Pointer(pool)), C.VkDescriptorSetLayout(unsafe.Pointer(layout)), &h))
	})
	return vulkan.DescriptorSet(unsafe.Pointer(h)), err
}

// descriptor is one binding's write: a storage image, a texel view, or a
// buffer range.
type descriptor struct {
	id     uint64 // the buffer's identity (Buffer.id), for comparing sets
	kind   vulkan.DescriptorType
	buffer vulkan.Buffer
	offset uint64
	size   uint64
	view   vulkan.BufferView
	image  vulkan.ImageView
}

func (d *Device) updateSet(set vulkan.DescriptorSet, descs []descriptor) error {
	if len(descs) == 0 {
		return nil
	}
	b := make([]C.vkattn_binding, len(descs))
	for i, w := range descs {
		b[i] = C.vkattn_binding{
			_type:  C.uint32_t(w.kind),
			buffer: C.VkBuffer(unsafe.Pointer(w.buffer)),
			offset: C.VkDeviceSize(w.offset),
			_range: C.VkDeviceSize(w.size),
			view:   C.VkBufferView(unsafe.Pointer(w.view)),
			image:  C.VkImageView(unsafe.Pointer(w.image)),
		}
	}
	return d.call("vkUpdateDescriptorSets", func() vulkan.Result {
		return result(C.vkattn_update_set(&d.calls.c, d.cDevice(),
			C.VkDescriptorSet(unsafe.Pointer(set)), &b[0], C.uint32_t(len(b))))
	})
}

func (d *Device) submit(cmd vulkan.CommandBuffer, fence vulkan.Fence) error {
	return d.call("vkQueueSubmit", func() vulkan.Result {
		return result(C.vkattn_submit(&d.calls.c, C.VkQueue(unsafe.Pointer(d.queue)),
			C.VkCommandBuffer(unsafe.Pointer(cmd)), C.VkFence(unsafe.Pointer(fence))))
	})
}

func (d *Device) barrier(cmd vulkan.CommandBuffer, srcStages, dstStages vulkan.PipelineStageFlags, srcAccess, dstAccess vulkan.AccessFlags) {
	C.vkattn_barrier(&d.calls.c, C.VkCommandBuffer(unsafe.Pointer(cmd)),
		C.VkPipelineStageFlags(srcStages), C.VkPipelineStageFlags(dstStages),
		C.VkAccessFlags(srcAccess), C.VkAccessFlags(dstAccess))
}

func (d *Device) copyBuffer(cmd vulkan.CommandBuffer, src, dst vulkan.Buffer, srcOffset, dstOffset, size uint64) {
	C.vkattn_copy(&d.calls.c, C.VkCommandBuffer(unsafe.Pointer(cmd)),
		C.VkBuffer(unsafe.Pointer(src)), C.VkBuffer(unsafe.Pointer(dst)),
		C.VkDeviceSize(srcOffset), C.VkDeviceSize(dstOffset), C.VkDeviceSize(size))
}

// copyRegions records one vkCmdCopyBuffer of every region (Region has
// VkBufferCopy's layout: three 64-bit words).
func (d *Device) copyRegions(cmd vulkan.CommandBuffer, src, dst vulkan.Buffer, regions []Region) {
	C.vkattn_copy_regions(&d.calls.c, C.VkCommandBuffer(unsafe.Pointer(cmd)),
		C.VkBuffer(unsafe.Pointer(src)), C.VkBuffer(unsafe.Pointer(dst)),
		C.uint32_t(len(regions)), (*C.VkBufferCopy)(unsafe.Pointer(first(regions))))
}

func (d *Device) cDevice() C.VkDevice { return C.VkDevice(unsafe.Pointer(d.handle)) }

// first is the address of s[0] (nil for an empty s), for C arrays built in
// Go memory that holds no Go pointers (cgo pins it for the call).
func first[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}
