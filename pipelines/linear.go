package pipelines

import (
	"encoding/binary"
	"fmt"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/vk"
)

// LinearPlan is what the planner chose for a dense layer Y = X W^T + b.
type LinearPlan struct {
	Variant   Variant
	Path      core.LoadPath
	Vec4      bool
	TileRows  int // rows of X per invocation (fixed by the shader)
	TileCols  int // outputs per invocation (fixed by the shader)
	WorkGroup int
	Grid      [3]uint32
	Why       string     // why this load path
	X, W      core.DType // element types of the inputs and the weights
}

func (p LinearPlan) String() string {
	loads := "scalar loads"
	if p.Vec4 {
		loads = "vec4 loads"
	}
	return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), %dx%d output tile per invocation, workgroup %d, grid %dx%d",
		p.Variant, p.Path, p.Why, loads, typesNote([]string{"X", "W"}, p.X, p.W), p.TileRows, p.TileCols, p.WorkGroup, p.Grid[0], p.Grid[1])
}

// LinearInput is what the planner needs to know about a dense layer.
type LinearInput struct {
	Rows, Outputs, Inputs int // M, N, K
	// Aligned: X and W offsets and row strides are multiples of 4 (and so
	// is Inputs), so rows can be read as vec4s.
	Aligned bool
	X, W    core.DType // element types of the inputs and the weights
	Force   core.LoadPath
	Tuning  *core.Tuning // nil: DefaultTuning; the path's workgroup size is used
}

// PlanLinear picks the dense-layer variant and grid for a device.
func PlanLinear(dev vk.PhysicalDevice, in LinearInput) (LinearPlan, error) {
	var p LinearPlan
	if in.Rows <= 0 || in.Outputs <= 0 || in.Inputs <= 0 {
		return p, limitf("dense layer of %d rows, %d outputs, %d inputs: all must be at least 1", in.Rows, in.Outputs, in.Inputs)
	}
	path, tuning, why, err := choosePath(dev, in.Force, in.Tuning)
	if err != nil {
		return p, err
	}
	if !in.X.Valid() || !in.W.Valid() {
		return p, fmt.Errorf("dense layer: element types %v and %v; the kernel reads %v", in.X, in.W, DTypes)
	}
	p.Path, p.Why, p.X, p.W = path, why, in.X, in.W
	p.Vec4 = in.Aligned && (p.Path == core.StorageLoadPath || dev.TexelWords4)
	p.Variant = Variant{Family: FamilyLinear, Path: p.Path, Vec4: p.Vec4}
	p.TileRows, p.TileCols = 4, 4
	p.WorkGroup = min(tuning.WorkGroup, int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations))
	colTiles := (in.Outputs + p.TileCols - 1) / p.TileCols
	p.Grid = [3]uint32{uint32((colTiles + p.WorkGroup - 1) / p.WorkGroup), uint32((in.Rows + p.TileRows - 1) / p.TileRows), 1}
	for i, what := range []string{"output tile blocks", "row tiles"} {
		if p.Grid[i] > dev.Limits.MaxWorkGroupCount[i] {
			return p, limitf("%d %s exceed the device's %d workgroups on axis %d", p.Grid[i], what, dev.Limits.MaxWorkGroupCount[i], i)
		}
	}
	return p, nil
}

// Rows is a matrix of row vectors in a buffer: row r starts at element
// Offset + r*Stride and is contiguous.
type Rows struct {
	Buffer *vk.Buffer
	Offset int
	Stride int
}

// LinearArgs is one dense layer Y = X W^T + b in kernel terms: X is
// (Rows, Inputs), W (Outputs, Inputs) in PyTorch's (out, in) layout, Y
// (Rows, Outputs), Bias Outputs floats from element BiasOffset (nil: none).
type LinearArgs struct {
	Rows, Outputs, Inputs int
	X, W, Y               Rows
	Bias                  *vk.Buffer
	BiasOffset            int
}

const linearFlagBias = 1

// Linear binds a dense layer. A layer whose X, W or Y is larger than one
// binding reaches runs as blocks of rows and outputs, each bound through
// buffer windows, in the same step.
func (ks *Kernels) Linear(p LinearPlan, x LinearArgs) (*Step, error) {
	info := ks.dev.Info
	spec := make([]int32, linSpecCount)
	spec[specLocalSize], spec[linSpecXType], spec[linSpecWType] = int32(p.WorkGroup), typeSpec(p.X), typeSpec(p.W)
	k, err := ks.get(p.Variant, linearBindingTypes(p), spec...)
	if err != nil {
		return nil, err
	}
	rows, outs, err := linearBlocks(info, p, &x)
	if err != nil {
		return nil, err
	}
	st := &Step{}
	for r0 := 0; r0 < x.Rows; r0 += rows {
		for o0 := 0; o0 < x.Outputs; o0 += outs {
			if err := ks.linearBlock(st, k, p, &x, r0, min(rows, x.Rows-r0), o0, min(outs, x.Outputs-o0)); err != nil {
				st.Close()
				return nil, err
			}
		}
	}
	return st, nil
}

// linearSpans are the element ranges of X, W, Y and bias that the block of
// rows [r0, r0+nr) and outputs [o0, o0+no) touches.
func linearSpans(x *LinearArgs, r0, nr, o0, no int) [4]span {
	row := func(v Rows, first, n, width int) span {
		lo := v.Offset + first*v.Stride
		return span{lo, lo + (n-1)*v.Stride + width}
	}
	return [4]span{
		row(x.X, r0, nr, x.Inputs),
		row(x.W, o0, no, x.Inputs),
		{x.Y.Offset + r0*x.Y.Stride + o0, x.Y.Offset + (r0+nr-1)*x.Y.Stride + o0 + no},
		{x.BiasOffset + o0, x.BiasOffset + o0 + no},
	}
}

// types are the element types of X, W, Y and the bias.
func (p LinearPlan) types() [4]core.DType { return [4]core.DType{p.X, p.W, core.Float32, core.Float32} }

// linearBlocks picks the block size: the whole layer if it fits, else as
// many rows (and outputs) per block as fit, in whole tiles.
func linearBlocks(dev vk.PhysicalDevice, p LinearPlan, x *LinearArgs) (rows, outs int, err error) {
	texel := p.Path == core.TexelLoadPath
	fit := func(nr, no int) error {
		sp := linearSpans(x, 0, nr, 0, no)
		for i, what := range []string{"X", "W", "Y", "bias"} {
			if i == 3 && x.Bias == nil {
				continue
			}
			if _, err := bindWindow(dev, what, sp[i], texel && i < 2, p.Vec4 && i < 2, p.types()[i]); err != nil {
				return err
			}
		}
		return nil
	}
	// Halve the outputs until W's block fits beside one row tile, then
	// the rows until everything fits.
	rows, outs = x.Rows, x.Outputs
	for outs > p.TileCols && fit(min(rows, p.TileRows), outs) != nil {
		outs = (outs/2 + p.TileCols - 1) / p.TileCols * p.TileCols
	}
	for rows > p.TileRows && fit(rows, outs) != nil {
		rows = (rows/2 + p.TileRows - 1) / p.TileRows * p.TileRows
	}
	if err := fit(rows, outs); err != nil {
		return 0, 0, limitf("dense layer (%d x %d) x (%d x %d)^T: even one tile does not fit a binding: %v", x.Rows, x.Inputs, x.Outputs, x.Inputs, err)
	}
	return rows, outs, nil
}

// linearBlock binds one block of rows and outputs into st.
func (ks *Kernels) linearBlock(st *Step, k *vk.Kernel, p LinearPlan, x *LinearArgs, r0, nr, o0, no int) error {
	info := ks.dev.Info
	texel := p.Path == core.TexelLoadPath
	sp := linearSpans(x, r0, nr, o0, no)
	var args [4]vk.Arg
	var first [4]int
	for i, buf := range []*vk.Buffer{x.X.Buffer, x.W.Buffer, x.Y.Buffer, x.Bias} {
		if buf == nil {
			continue
		}
		w, err := bindWindow(info, []string{"X", "W", "Y", "bias"}[i], sp[i], texel && i < 2, p.Vec4 && i < 2, p.types()[i])
		if err != nil {
			return err
		}
		args[i], first[i] = vk.Arg{Buffer: buf, Offset: w.offset, Range: w.size}, w.first
	}
	flags := 0
	if x.Bias != nil {
		flags |= linearFlagBias
	} else {
		b, err := ks.or(nil)
		if err != nil {
			return err
		}
		args[3] = vk.Arg{Buffer: b}
	}
	ints := []int{
		nr, no, x.Inputs, flags,
		sp[0].lo - first[0], x.X.Stride, 0, 0,
		sp[1].lo - first[1], x.W.Stride, 0, 0,
		sp[2].lo - first[2], x.Y.Stride, sp[3].lo - first[3], 0,
	}
	params, err := st.params(ks, int32Bytes(ints))
	if err != nil {
		return err
	}
	set, err := k.Bind([]vk.Arg{{Buffer: params}, args[0], args[1], args[3], args[2]})
	if err != nil {
		return err
	}
	st.own(set)
	colTiles := (no + p.TileCols - 1) / p.TileCols
	groups := [3]uint32{uint32((colTiles + p.WorkGroup - 1) / p.WorkGroup), uint32((nr + p.TileRows - 1) / p.TileRows), 1}
	st.dispatches = append(st.dispatches, dispatch{kernel: k, set: set, groups: groups})
	return nil
}

// linearBindingTypes are the dense layer's bindings: Params, X, W (texel
// views on the texel path), bias, Y.
func linearBindingTypes(p LinearPlan) []vk.BindingType {
	b := make([]vk.BindingType, linearBindY+1)
	for i := range b {
		b[i] = vk.StorageBuffer
	}
	b[linearBindParams] = vk.UniformBuffer
	if p.Path == core.TexelLoadPath {
		b[linearBindX], b[linearBindW] = texelBinding(p.X, p.Vec4), texelBinding(p.W, p.Vec4)
	}
	return b
}

// headMeanBindingTypes are the head mean's bindings: weights, mean.
func headMeanBindingTypes() []vk.BindingType {
	return []vk.BindingType{headMeanBindW: vk.StorageBuffer, headMeanBindMean: vk.StorageBuffer}
}

// HeadMean binds the mean over heads of attention weights (B, H, n) into
// (B, n).
func (ks *Kernels) HeadMean(weights, mean *vk.Buffer, b, h, n int) (*Step, error) {
	if err := checkRange(ks.dev.Info, "weights", weights, false, false, core.Float32); err != nil {
		return nil, err
	}
	k, err := ks.getPushed(Variant{Family: FamilyHeadMean}, headMeanBindingTypes(), 12)
	if err != nil {
		return nil, err
	}
	set, err := ks.bind(k, weights, mean)
	if err != nil {
		return nil, err
	}
	groups := (b*n + 63) / 64
	if groups > int(ks.dev.Info.Limits.MaxWorkGroupCount[0]) {
		set.Close()
		return nil, limitf("%d averaged weights need %d workgroups, the device allows %d", b*n, groups, ks.dev.Info.Limits.MaxWorkGroupCount[0])
	}
	st := &Step{owned: []closer{set}}
	st.dispatches = []dispatch{{kernel: k, set: set, groups: [3]uint32{uint32(groups), 1, 1}, push: int32Bytes([]int{b, h, n})}}
	return st, nil
}

// int32Bytes encodes ints as little-endian int32s (std140 ivec4 rows when
// the count is a multiple of 4).
func int32Bytes(ints []int) []byte {
	out := make([]byte, 4*len(ints))
	for i, v := range ints {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(v)))
	}
	return out
}
