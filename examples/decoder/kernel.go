package main

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// Kernel is a compute shader ready to dispatch: its module, a descriptor
// set layout of storage buffers at bindings 0..Buffers-1, a pipeline
// layout with PushWords 32-bit push constants, and the pipeline.
type Kernel struct {
	Name      string
	Buffers   int
	PushWords int
	module    vulkan.ShaderModule
	setLayout vulkan.DescriptorSetLayout
	layout    vulkan.PipelineLayout
	pipeline  vulkan.Pipeline
}

// NewKernel makes a kernel of SPIR-V code whose entry point is main.
func (h *Host) NewKernel(name string, spirv []byte, buffers, pushWords int) (*Kernel, error) {
	if len(spirv) == 0 || len(spirv)%4 != 0 {
		return nil, fmt.Errorf("kernel %s: %d bytes of SPIR-V, want a positive multiple of 4", name, len(spirv))
	}
	k := &Kernel{Name: name, Buffers: buffers, PushWords: pushWords}
	fail := func(err error) (*Kernel, error) {
		k.destroy(h.Device)
		return nil, fmt.Errorf("kernel %s: %w", name, err)
	}
	code := make([]uint32, len(spirv)/4)
	for i := range code {
		code[i] = binary.LittleEndian.Uint32(spirv[4*i:])
	}
	// The create info points at code (Go memory) for the call.
	minfo := &vulkan.ShaderModuleCreateInfo{SType: vulkan.StructureTypeShaderModuleCreateInfo,
		CodeSize: uint(len(spirv)), PCode: code}
	var module vulkan.ShaderModule
	err := check("vkCreateShaderModule", vulkan.CreateShaderModule(h.Device, minfo, nil, &module))
	minfo.Free()
	if err != nil {
		return fail(err)
	}
	k.module = module

	bindings := make([]vulkan.DescriptorSetLayoutBinding, buffers)
	for i := range bindings {
		bindings[i] = vulkan.DescriptorSetLayoutBinding{Binding: uint32(i), DescriptorType: vulkan.DescriptorTypeStorageBuffer,
			DescriptorCount: 1, StageFlags: vulkan.ShaderStageFlags(vulkan.ShaderStageComputeBit)}
	}
	linfo := &vulkan.DescriptorSetLayoutCreateInfo{SType: vulkan.StructureTypeDescriptorSetLayoutCreateInfo,
		BindingCount: uint32(buffers), PBindings: bindings}
	var setLayout vulkan.DescriptorSetLayout
	err = check("vkCreateDescriptorSetLayout", vulkan.CreateDescriptorSetLayout(h.Device, linfo, nil, &setLayout))
	linfo.Free()
	if err != nil {
		return fail(err)
	}
	k.setLayout = setLayout

	pinfo := &vulkan.PipelineLayoutCreateInfo{SType: vulkan.StructureTypePipelineLayoutCreateInfo,
		SetLayoutCount: 1, PSetLayouts: []vulkan.DescriptorSetLayout{setLayout}}
	if pushWords > 0 {
		pinfo.PushConstantRangeCount = 1
		pinfo.PPushConstantRanges = []vulkan.PushConstantRange{{StageFlags: vulkan.ShaderStageFlags(vulkan.ShaderStageComputeBit),
			Size: uint32(4 * pushWords)}}
	}
	var layout vulkan.PipelineLayout
	err = check("vkCreatePipelineLayout", vulkan.CreatePipelineLayout(h.Device, pinfo, nil, &layout))
	pinfo.Free()
	if err != nil {
		return fail(err)
	}
	k.layout = layout

	cinfo := []vulkan.ComputePipelineCreateInfo{{SType: vulkan.StructureTypeComputePipelineCreateInfo,
		Stage: vulkan.PipelineShaderStageCreateInfo{SType: vulkan.StructureTypePipelineShaderStageCreateInfo,
			Stage: vulkan.ShaderStageComputeBit, Module: module, PName: "main\x00"},
		Layout: layout}}
	pipelines := make([]vulkan.Pipeline, 1)
	var r vulkan.Result
	withoutGC(func() { r = vulkan.CreateComputePipelines(h.Device, nil, 1, cinfo, nil, pipelines) })
	if err := check("vkCreateComputePipelines", r); err != nil {
		return fail(err)
	}
	k.pipeline = pipelines[0]
	h.kernels = append(h.kernels, k)
	return k, nil
}

// Binding is a kernel with its buffers attached: a descriptor set of the
// host's pool, written once and used by every dispatch recorded with it.
type Binding struct {
	Kernel  *Kernel
	Buffers []*Buffer
	set     vulkan.DescriptorSet
}

// Bind attaches bufs, whole, to k's bindings 0, 1, ... in order.
func (h *Host) Bind(k *Kernel, bufs ...*Buffer) (*Binding, error) {
	if len(bufs) != k.Buffers {
		return nil, fmt.Errorf("kernel %s takes %d buffers, given %d", k.Name, k.Buffers, len(bufs))
	}
	info := &vulkan.DescriptorSetAllocateInfo{SType: vulkan.StructureTypeDescriptorSetAllocateInfo,
		DescriptorPool: h.descPool, DescriptorSetCount: 1, PSetLayouts: []vulkan.DescriptorSetLayout{k.setLayout}}
	var set vulkan.DescriptorSet
	err := check("vkAllocateDescriptorSets", vulkan.AllocateDescriptorSets(h.Device, info, &set))
	info.Free()
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	writes := make([]vulkan.WriteDescriptorSet, len(bufs))
	for i, b := range bufs {
		writes[i] = vulkan.WriteDescriptorSet{SType: vulkan.StructureTypeWriteDescriptorSet, DstSet: set,
			DstBinding: uint32(i), DescriptorCount: 1, DescriptorType: vulkan.DescriptorTypeStorageBuffer,
			PBufferInfo: []vulkan.DescriptorBufferInfo{{Buffer: b.Handle, Range: vulkan.DeviceSize(vulkan.WholeSize)}}}
	}
	withoutGC(func() { vulkan.UpdateDescriptorSets(h.Device, uint32(len(writes)), writes, 0, nil) })
	return &Binding{Kernel: k, Buffers: bufs, set: set}, nil
}

// Dispatch records b's kernel over groups workgroups with the push
// constants push, then a barrier that makes its writes visible to the
// compute shaders and transfers recorded after it.
func (h *Host) Dispatch(b *Binding, push []uint32, groups int) error {
	k := b.Kernel
	if !h.recording {
		return fmt.Errorf("dispatch of %s: the command buffer is not recording (Begin first)", k.Name)
	}
	if len(push) != k.PushWords {
		return fmt.Errorf("dispatch of %s: %d push constants, want %d", k.Name, len(push), k.PushWords)
	}
	if groups < 1 || groups > 65535 {
		return fmt.Errorf("dispatch of %s: %d workgroups, want 1 to 65535", k.Name, groups)
	}
	vulkan.CmdBindPipeline(h.Cmd, vulkan.PipelineBindPointCompute, k.pipeline)
	vulkan.CmdBindDescriptorSets(h.Cmd, vulkan.PipelineBindPointCompute, k.layout, 0, 1, []vulkan.DescriptorSet{b.set}, 0, nil)
	if len(push) > 0 {
		// vkCmdPushConstants copies the values into the command buffer;
		// push holds no Go pointers, so cgo may pass it for the call.
		vulkan.CmdPushConstants(h.Cmd, k.layout, vulkan.ShaderStageFlags(vulkan.ShaderStageComputeBit), 0,
			uint32(4*len(push)), unsafe.Pointer(&push[0]))
	}
	vulkan.CmdDispatch(h.Cmd, uint32(groups), 1, 1)
	h.Barrier(vulkan.PipelineStageComputeShaderBit|vulkan.PipelineStageTransferBit,
		vulkan.AccessShaderReadBit|vulkan.AccessShaderWriteBit|vulkan.AccessTransferReadBit|vulkan.AccessTransferWriteBit)
	return nil
}

// groupsOf is how many workgroups of 64 lanes cover n.
func groupsOf(n int) int { return (n + 63) / 64 }

func (k *Kernel) destroy(dev vulkan.Device) {
	if k.pipeline != nil {
		vulkan.DestroyPipeline(dev, k.pipeline, nil)
		k.pipeline = nil
	}
	if k.layout != nil {
		vulkan.DestroyPipelineLayout(dev, k.layout, nil)
		k.layout = nil
	}
	if k.setLayout != nil {
		vulkan.DestroyDescriptorSetLayout(dev, k.setLayout, nil)
		k.setLayout = nil
	}
	if k.module != nil {
		vulkan.DestroyShaderModule(dev, k.module, nil)
		k.module = nil
	}
}
