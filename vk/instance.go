package vk

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/vkattn/vkattn/core"
	vulkan "github.com/vulkan-go/vulkan"
)

const validationLayer = "VK_LAYER_KHRONOS_validation"

// extSubgroupSizeControl lets compute pipelines require a subgroup size
// and full subgroups (core in Vulkan 1.3; vkattn's instance is 1.1).
const extSubgroupSizeControl = "VK_EXT_subgroup_size_control"

// extMemoryBudget reports each heap's budget and usage (what else uses it).
const extMemoryBudget = "VK_EXT_memory_budget"

// Portability drivers (MoltenVK on macOS, over Metal) implement a subset of
// Vulkan. The loader lists them only to an instance that enables
// VK_KHR_portability_enumeration with the
// VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR flag, and a device that
// offers VK_KHR_portability_subset must be created with it enabled.
// vulkan-go's 1.1.88 headers predate both: the names and the flag's value
// are spelled out here.
const (
	extPortabilityEnumeration = "VK_KHR_portability_enumeration"
	extPortabilitySubset      = "VK_KHR_portability_subset"
	// createEnumeratePortability is VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR.
	createEnumeratePortability uint32 = 0x00000001
)

// portabilityInstance is what an instance asks for, given the instance
// extensions the loader offers, so that portability drivers are listed:
// the enumeration extension and its flag where offered, nothing otherwise
// (a loader older than 1.3.216 lists them without asking, and the flag
// without the extension is invalid).
func portabilityInstance(offered []string) (extensions []string, flags uint32) {
	if slices.Contains(offered, extPortabilityEnumeration) {
		return []string{extPortabilityEnumeration}, createEnumeratePortability
	}
	return nil, 0
}

// portabilityDevice is what a device must enable, given the device
// extensions its physical device offers: VK_KHR_portability_subset where
// offered (the spec requires it then; it needs
// VK_KHR_get_physical_device_properties2, core in the 1.1 instance).
//
// Enabling it turns on none of the features of
// VkPhysicalDevicePortabilitySubsetFeaturesKHR, and vkattn needs none:
// they are all graphics (constantAlphaColorBlendFactors, events,
// imageViewFormatReinterpretation, imageViewFormatSwizzle,
// imageView2DOn3DImage, multisampleArrayImage, mutableComparisonSamplers,
// pointPolygons, samplerMipLodBias, separateStencilMaskRef,
// shaderSampleRateInterpolationFunctions, tessellationIsolines,
// tessellationPointMode, triangleFans, vertexAttributeAccessBeyondStride)
// and its one property is a vertex stride alignment. vkattn's compute uses
// no events, and a window's views keep their image's format and the
// identity swizzle. What compute does depend on (subgroup sizes and
// operations, texel formats, limits, timestamps) is queried from the
// device as on any other (describe), not assumed.
func portabilityDevice(offered []string) []string {
	if slices.Contains(offered, extPortabilitySubset) {
		return []string{extPortabilitySubset}
	}
	return nil
}

// appendNew appends each of names that list does not hold yet.
func appendNew(list []string, names ...string) []string {
	for _, n := range names {
		if !slices.Contains(list, n) {
			list = append(list, n)
		}
	}
	return list
}

// ErrNoDriver is wrapped by the error of an instance or device choice when
// the Vulkan loader finds no driver (or none with a compute queue).
var ErrNoDriver = errors.New("vk: no Vulkan driver found")

// noDriverHint says how to get a driver.
func noDriverHint() string {
	hint := "install your GPU vendor's Vulkan driver, or Mesa's CPU driver lavapipe " +
		"(Debian/Ubuntu: apt-get install mesa-vulkan-drivers)"
	for _, env := range []string{"VK_ICD_FILENAMES", "VK_DRIVER_FILES"} {
		if v, ok := os.LookupEnv(env); ok {
			hint += fmt.Sprintf("; %s=%q must name a driver's JSON manifest (unset it to search the usual places)", env, v)
		}
	}
	return hint
}

// Instance owns a VkInstance and, with validation on, its debug callback,
// and the window surfaces made on it.
type Instance struct {
	handle     vulkan.Instance
	borrowed   bool // another owner's (Borrow): never closed here
	callback   vulkan.DebugReportCallback
	validation bool
	devices    []PhysicalDevice
	extensions []string

	surface  surfaceCalls // resolved on first use
	mu       sync.Mutex
	surfaces map[*Surface]struct{}
}

// InstanceConfig says how to create an Instance.
type InstanceConfig struct {
	// Validation enables VK_LAYER_KHRONOS_validation and collects its
	// messages (see ValidationMessages). It fails if the layer is missing.
	Validation bool
	// Extensions are instance extensions to enable, such as the surface
	// extensions a window needs; compute needs none. A missing one is an
	// error naming it.
	Extensions []string
}

// validation messages are collected process-wide: vulkan-go dispatches every
// debug-report callback through one global function.
var (
	messagesMu sync.Mutex
	messages   []string
)

// ValidationMessages returns every warning or error the validation layer
// reported in this process so far.
func ValidationMessages() []string {
	messagesMu.Lock()
	defer messagesMu.Unlock()
	return append([]string(nil), messages...)
}

func onDebugReport(flags vulkan.DebugReportFlags, _ vulkan.DebugReportObjectType, _ uint64, _ uint, code int32, prefix, msg string, _ unsafe.Pointer) vulkan.Bool32 {
	messagesMu.Lock()
	messages = append(messages, fmt.Sprintf("[%s %d] %s", prefix, code, msg))
	messagesMu.Unlock()
	return vulkan.False
}

// LayerAvailable reports whether the named instance layer is installed.
func LayerAvailable(name string) (bool, error) {
	if err := load(); err != nil {
		return false, err
	}
	names, err := enumerateLayers()
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if n == name {
			return true, nil
		}
	}
	return false, nil
}

// NewInstance creates a Vulkan 1.1 instance and enumerates its devices.
func NewInstance(cfg InstanceConfig) (*Instance, error) {
	if err := load(); err != nil {
		return nil, err
	}
	var layers, extensions []string
	have, err := instanceExtensions()
	if err != nil {
		return nil, err
	}
	for _, e := range cfg.Extensions {
		if !slices.Contains(have, e) {
			return nil, fmt.Errorf("vk: instance extension %s is not available (the loader and drivers offer %s)", e, strings.Join(have, ", "))
		}
	}
	extensions = appendNew(extensions, cfg.Extensions...)
	portable, flags := portabilityInstance(have)
	extensions = appendNew(extensions, portable...)
	if cfg.Validation {
		ok, err := LayerAvailable(validationLayer)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("vk: validation requested but %s is not installed (apt-get install vulkan-validationlayers)", validationLayer)
		}
		layers = []string{validationLayer}
		extensions = appendNew(extensions, "VK_EXT_debug_report")
	}
	handle, err := createInstance(vulkan.MakeVersion(1, 1, 0), flags, layers, extensions)
	var verr *Error
	if errors.As(err, &verr) && vulkan.Result(verr.Result) == vulkan.ErrorIncompatibleDriver {
		return nil, fmt.Errorf("%w: %s (%v)", ErrNoDriver, noDriverHint(), err)
	}
	if err != nil {
		return nil, err
	}
	// Without InitInstance the first instance-level call jumps to address 0.
	if err := vulkan.InitInstance(handle); err != nil {
		vulkan.DestroyInstance(handle, nil)
		return nil, fmt.Errorf("vk: InitInstance: %w", err)
	}
	inst := &Instance{handle: handle, validation: cfg.Validation, extensions: extensions, surfaces: map[*Surface]struct{}{}}
	objectCreated()
	if cfg.Validation {
		cb := vulkan.DebugReportCallbackCreateInfo{
			SType:       vulkan.StructureTypeDebugReportCallbackCreateInfo,
			Flags:       vulkan.DebugReportFlags(vulkan.DebugReportErrorBit | vulkan.DebugReportWarningBit | vulkan.DebugReportPerformanceWarningBit),
			PfnCallback: onDebugReport,
		}
		var callback vulkan.DebugReportCallback
		err := call("vkCreateDebugReportCallbackEXT", func() vulkan.Result { return vulkan.CreateDebugReportCallback(handle, &cb, nil, &callback) })
		cb.Free() // vulkan-go keeps the C copy of a struct until Free
		if err != nil {
			inst.Close()
			return nil, err
		}
		inst.callback = callback
		objectCreated()
	}
	devs, err := inst.enumerate()
	if err != nil {
		inst.Close()
		return nil, err
	}
	inst.devices = devs
	return inst, nil
}

// Validation reports whether the validation layer is on.
func (in *Instance) Validation() bool { return in.validation }

// Extensions lists the instance extensions the instance was created with:
// the configured ones and those vkattn adds (portability enumeration where
// the loader offers it, debug report under validation). A borrowed
// instance's are its owner's and unknown: nil.
func (in *Instance) Extensions() []string { return slices.Clone(in.extensions) }

// Close destroys the instance and the surfaces still open on it. Devices
// created from it must be closed first.
func (in *Instance) Close() {
	if in == nil || in.handle == nil || in.borrowed {
		return
	}
	in.mu.Lock()
	for s := range in.surfaces {
		s.destroyLocked()
	}
	in.mu.Unlock()
	if in.callback != nil {
		vulkan.DestroyDebugReportCallback(in.handle, in.callback, nil)
		in.callback = nil
		objectDestroyed()
	}
	vulkan.DestroyInstance(in.handle, nil)
	in.handle = nil
	objectDestroyed()
}

// preference orders device types for the default pick: discrete >
// integrated > virtual > CPU > other.
func preference(t core.DeviceType) int {
	return [...]int{0, 3, 4, 2, 1}[t]
}

// PhysicalDevice describes one Vulkan device: its description, and the
// handle and queue family NewDevice opens it with.
type PhysicalDevice struct {
	core.DeviceInfo
	queueFamily uint32
	handle      vulkan.PhysicalDevice
	// portable is what a device on it must enable (portabilityDevice).
	portable []string
}

// Devices lists the instance's devices in enumeration order.
func (in *Instance) Devices() []PhysicalDevice { return append([]PhysicalDevice(nil), in.devices...) }

// DefaultDevice returns the index of the preferred device.
func (in *Instance) DefaultDevice() (int, error) {
	best := -1
	for i, d := range in.devices {
		if best < 0 || preference(d.Type) > preference(in.devices[best].Type) {
			best = i
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%w: no device with a compute queue; %s", ErrNoDriver, noDriverHint())
	}
	return best, nil
}

// FindDevice resolves a user's choice: "" is the default, a number is an
// index, anything else must match part of exactly one device name
// (case-insensitive).
func (in *Instance) FindDevice(choice string) (int, error) {
	if choice == "" {
		return in.DefaultDevice()
	}
	var idx int
	if _, err := fmt.Sscanf(choice, "%d", &idx); err == nil && fmt.Sprint(idx) == choice {
		if idx < 0 || idx >= len(in.devices) {
			return 0, fmt.Errorf("vk: device index %d out of range: %d device(s)", idx, len(in.devices))
		}
		return idx, nil
	}
	found := -1
	for i, d := range in.devices {
		if strings.Contains(strings.ToLower(d.Name), strings.ToLower(choice)) {
			if found >= 0 {
				return 0, fmt.Errorf("vk: device name %q matches both %q and %q", choice, in.devices[found].Name, d.Name)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("vk: no device matches %q", choice)
	}
	return found, nil
}

func (in *Instance) enumerate() ([]PhysicalDevice, error) {
	var n uint32
	if err := call("vkEnumeratePhysicalDevices", func() vulkan.Result { return vulkan.EnumeratePhysicalDevices(in.handle, &n, nil) }); err != nil {
		return nil, err
	}
	handles := make([]vulkan.PhysicalDevice, n)
	if err := call("vkEnumeratePhysicalDevices", func() vulkan.Result { return vulkan.EnumeratePhysicalDevices(in.handle, &n, handles) }); err != nil {
		return nil, err
	}
	var out []PhysicalDevice
	for i, h := range handles[:n] {
		d, ok, err := describe(in.handle, h)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // no compute queue
		}
		d.Index = i
		out = append(out, d)
	}
	for i := range out {
		out[i].Index = i
	}
	return out, nil
}

func describe(inst vulkan.Instance, h vulkan.PhysicalDevice) (PhysicalDevice, bool, error) {
	var props vulkan.PhysicalDeviceProperties
	vulkan.GetPhysicalDeviceProperties(h, &props)
	props.Deref()
	props.Limits.Deref()
	defer props.Free() // vulkan-go's C copy; the values are in the Go fields
	lim := props.Limits
	d := PhysicalDevice{handle: h, DeviceInfo: core.DeviceInfo{
		Name:     vulkan.ToString(props.DeviceName[:]),
		Type:     core.DeviceType(props.DeviceType),
		VendorID: props.VendorID,
		DeviceID: props.DeviceID,
		APIVersion: fmt.Sprintf("%d.%d.%d", props.ApiVersion>>22, (props.ApiVersion>>12)&0x3ff,
			props.ApiVersion&0xfff),
		PipelineCacheUUID: props.PipelineCacheUUID,
		Limits: core.Limits{
			MaxStorageBufferRange:   lim.MaxStorageBufferRange,
			MaxTexelBufferElements:  lim.MaxTexelBufferElements,
			MaxUniformBufferRange:   lim.MaxUniformBufferRange,
			MaxPushConstantsSize:    lim.MaxPushConstantsSize,
			MaxSharedMemory:         lim.MaxComputeSharedMemorySize,
			MaxWorkGroupCount:       lim.MaxComputeWorkGroupCount,
			MaxWorkGroupSize:        lim.MaxComputeWorkGroupSize,
			MaxWorkGroupInvocations: lim.MaxComputeWorkGroupInvocations,
			MinStorageAlignment:     uint64(lim.MinStorageBufferOffsetAlignment),
			MinTexelAlignment:       uint64(lim.MinTexelBufferOffsetAlignment),
			MinUniformAlignment:     uint64(lim.MinUniformBufferOffsetAlignment),
			TimestampPeriod:         lim.TimestampPeriod,
			MaxImageDimension2D:     lim.MaxImageDimension2D,
			MaxAllocations:          lim.MaxMemoryAllocationCount,
			MaxStageUniformBuffers:  lim.MaxPerStageDescriptorUniformBuffers,
			MaxStageStorageBuffers:  lim.MaxPerStageDescriptorStorageBuffers,
			MaxStageSampledImages:   lim.MaxPerStageDescriptorSampledImages,
			MaxStageStorageImages:   lim.MaxPerStageDescriptorStorageImages,
			MaxStageResources:       lim.MaxPerStageResources,
		},
	}}
	if d.Type < core.DeviceOther || d.Type > core.DeviceCPU {
		d.Type = core.DeviceOther
	}
	exts, err := deviceExtensions(inst, h)
	if err != nil {
		return d, false, err
	}
	d.MemoryBudget = slices.Contains(exts, extMemoryBudget)
	d.portable = portabilityDevice(exts)
	if d.CooperativeMatrices, err = cooperativeMatrices(inst, h, exts); err != nil {
		return d, false, err
	}
	extra, err := queryExtra(inst, h, props.ApiVersion, slices.Contains(exts, extSubgroupSizeControl))
	if err != nil {
		return d, false, err
	}
	d.DriverID, d.DriverName, d.DriverInfo = extra.driverID, extra.driverName, extra.driverInfo
	d.Limits.SubgroupSize = extra.subgroup
	d.Limits.SubgroupShuffle = extra.shuffle
	d.Limits.MinSubgroupSize, d.Limits.MaxSubgroupSize = extra.minSubgroup, extra.maxSubgroup
	d.SubgroupSizeControl, d.FullSubgroups = extra.sizeControl, extra.sizeControl && extra.fullGroups

	qprops, err := queueFamilies(inst, h)
	if err != nil {
		return d, false, err
	}
	family := -1
	for i := range qprops {
		flags := qprops[i].flags
		if flags&vulkan.QueueComputeBit == 0 {
			continue
		}
		// Prefer a compute queue without graphics (dedicated compute) if any.
		if family < 0 || flags&vulkan.QueueGraphicsBit == 0 {
			family = i
			d.TimestampsOK = qprops[i].timestampBits > 0 && lim.TimestampPeriod > 0
		}
	}
	if family < 0 {
		return d, false, nil
	}
	d.queueFamily = uint32(family)

	var mem vulkan.PhysicalDeviceMemoryProperties
	vulkan.GetPhysicalDeviceMemoryProperties(h, &mem)
	mem.Deref()
	defer mem.Free()
	for i := uint32(0); i < mem.MemoryTypeCount; i++ {
		mem.MemoryTypes[i].Deref()
		f := vulkan.MemoryPropertyFlagBits(mem.MemoryTypes[i].PropertyFlags)
		want := vulkan.MemoryPropertyDeviceLocalBit | vulkan.MemoryPropertyHostVisibleBit | vulkan.MemoryPropertyHostCoherentBit
		if f&want == want {
			d.HostVisible = true
		}
	}
	for i := uint32(0); i < mem.MemoryHeapCount; i++ {
		mem.MemoryHeaps[i].Deref()
		if s := uint64(mem.MemoryHeaps[i].Size); s > d.Limits.MaxMemoryAllocation {
			d.Limits.MaxMemoryAllocation = s
		}
	}

	d.TexelR32F = uniformTexel(h, vulkan.FormatR32Sfloat)
	d.TexelWords = uniformTexel(h, vulkan.FormatR32Uint) && uniformTexel(h, vulkan.FormatR16Uint)
	d.TexelWords4 = uniformTexel(h, vulkan.FormatR32g32b32a32Uint) && uniformTexel(h, vulkan.FormatR16g16b16a16Uint)
	return d, true, nil
}

// uniformTexel reports whether format is usable as a uniform texel buffer.
func uniformTexel(h vulkan.PhysicalDevice, format vulkan.Format) bool {
	var fp vulkan.FormatProperties
	vulkan.GetPhysicalDeviceFormatProperties(h, format, &fp)
	fp.Deref()
	fp.Free()
	return vulkan.FormatFeatureFlagBits(fp.BufferFeatures)&vulkan.FormatFeatureUniformTexelBufferBit != 0
}
