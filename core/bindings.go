package core

import "fmt"

// BindingType is the kind of one descriptor binding of a kernel.
type BindingType int

const (
	UniformBuffer BindingType = iota
	StorageBuffer
	UniformTexelR32F // a float texel buffer read with texelFetch
	StorageImage     // an rgba8 image in the general layout
	// Raw words through a usamplerBuffer, widened by the shader: 32-bit
	// words (float32 data) and 16-bit ones (halves), one or four a texel.
	UniformTexelR32UI
	UniformTexelRGBA32UI
	UniformTexelR16UI
	UniformTexelRGBA16UI
	UniformTexelRGBA32F // four floats a texel (an additive mask read four keys a fetch)
)

// Texel reports whether t is a texel-buffer view.
func (t BindingType) Texel() bool {
	switch t {
	case UniformTexelR32F, UniformTexelR32UI, UniformTexelRGBA32UI, UniformTexelR16UI, UniformTexelRGBA16UI, UniformTexelRGBA32F:
		return true
	}
	return false
}

// CheckBindings refuses bindings more numerous, of some descriptor kind or
// in all, than one shader stage of the device may use, naming the limit.
func (d DeviceInfo) CheckBindings(bindings []BindingType) error {
	var uniform, storage, texel, images uint32
	for _, t := range bindings {
		switch {
		case t.Texel():
			texel++
		case t == UniformBuffer:
			uniform++
		case t == StorageImage:
			images++
		default:
			storage++
		}
	}
	lim := &d.Limits
	for _, c := range []struct {
		n, most uint32
		what    string
	}{
		{uniform, lim.MaxStageUniformBuffers, "uniform buffers (maxPerStageDescriptorUniformBuffers)"},
		{storage, lim.MaxStageStorageBuffers, "storage buffers (maxPerStageDescriptorStorageBuffers)"},
		{texel, lim.MaxStageSampledImages, "texel buffers (maxPerStageDescriptorSampledImages)"},
		{images, lim.MaxStageStorageImages, "storage images (maxPerStageDescriptorStorageImages)"},
		{uint32(len(bindings)), lim.MaxStageResources, "bindings in all (maxPerStageResources)"},
	} {
		if c.most > 0 && c.n > c.most {
			return fmt.Errorf("the kernel binds %d %s; %s allows %d", c.n, c.what, d.Name, c.most)
		}
	}
	return nil
}

// SpecConstant is one specialization constant of a kernel: the shader's
// constant_id and the 32-bit value it takes.
type SpecConstant struct {
	ID    uint32
	Value int32
}
