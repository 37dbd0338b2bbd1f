package pipelines

import (
	"fmt"

	"github.com/vkattn/vkattn/core"
)

// LinearPlan is what the planner chose for a dense layer Y = X W^T + b.
type LinearPlan struct {
	Variant Variant
	Path    core.LoadPath
	core.LinearLayout
	Why string // why this load path
}

func (p LinearPlan) String() string {
	blocks := ""
	if p.Blocks > 1 {
		blocks = fmt.Sprintf(", in %d blocks of %d rows x %d outputs (one binding's reach)", p.Blocks, p.BlockRows, p.BlockOutputs)
	}
	if p.Matrix > 0 {
		return fmt.Sprintf("kernel %s (%s), %dx%d output tile per workgroup of %d (%d-lane subgroups), grid %dx%d%s",
			p.Variant, p.Why, p.TileRows, p.TileCols, p.WorkGroup, p.SubgroupSize, p.Grid[0], p.Grid[1], blocks)
	}
	loads := "scalar loads"
	if p.Vec4 {
		loads = "vec4 loads"
	}
	return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), %dx%d output tile per invocation, workgroup %d, grid %dx%d%s",
		p.Variant, p.Path, p.Why, loads, typesNote([]string{"X", "W"}, p.X, p.W), p.TileRows, p.TileCols, p.WorkGroup, p.Grid[0], p.Grid[1], blocks)
}

// LinearInput is what the planner needs to know about a dense layer. X
// and Y are dense (row strides Inputs and Outputs) from their buffers'
// first element; W's rows start at element WOffset of its buffer.
type LinearInput struct {
	Rows, Outputs, Inputs int // M, N, K
	WOffset               int
	Bias                  bool // a bias of Outputs floats from element BiasOffset
	BiasOffset            int
	// Aligned: X and W offsets and row strides are multiples of 4 (and so
	// is Inputs), so rows can be read as vec4s.
	Aligned bool
	X, W    core.DType // element types of the inputs and the weights
	Force   core.LoadPath
	Tuning  *core.Tuning // nil: DefaultTuning; the path's workgroup size is used
	// Float32Products keeps float16 X and W off the cooperative matrices.
	Float32Products bool
}

// PlanLinear picks the dense-layer variant and grid for a device.
func PlanLinear(dev core.DeviceInfo, in LinearInput) (LinearPlan, error) {
	var p LinearPlan
	if in.Rows <= 0 || in.Outputs <= 0 || in.Inputs <= 0 {
		return p, Limitf("dense layer of %d rows, %d outputs, %d inputs: all must be at least 1", in.Rows, in.Outputs, in.Inputs)
	}
	if budget := dev.LoopBudget(); budget > 0 && linearLoops(in.Inputs) > budget {
		return p, Limitf("on %s, which ends an invocation's loops after %d iterations, a dense layer of %d inputs would loop %d times",
			dev.Name, budget, in.Inputs, linearLoops(in.Inputs))
	}
	path, tuning, why, err := choosePath(dev, in.Force, in.Tuning)
	if err != nil {
		return p, err
	}
	if !in.X.Valid() || !in.W.Valid() {
		return p, fmt.Errorf("dense layer: element types %v and %v; the kernel reads %v", in.X, in.W, DTypes)
	}
	p.Path, p.Why, p.X, p.W = path, why, in.X, in.W
	if !planLinearCoopmat(dev, in, &p) {
		p.Vec4 = in.Aligned && (p.Path == core.StorageLoadPath || dev.TexelWords4)
		p.Variant = Variant{Family: FamilyLinear, Path: p.Path, Vec4: p.Vec4}
		p.TileRows, p.TileCols = 4, 4
		p.WorkGroup = WholeSubgroups(dev, tuning.WorkGroup)
	}
	p.Grid = p.groups(in.Rows, in.Outputs)
	layer := LinearShape{Rows: in.Rows, Outputs: in.Outputs, Inputs: in.Inputs, X: RowLayout{Stride: in.Inputs},
		W: RowLayout{Offset: in.WOffset, Stride: in.Inputs}, Y: RowLayout{Stride: in.Outputs}, Bias: in.Bias, BiasOffset: in.BiasOffset}
	if p.BlockRows, p.BlockOutputs, err = linearBlocks(dev, p, &layer); err != nil {
		return p, err
	}
	p.Blocks = ceilDiv(in.Rows, p.BlockRows) * ceilDiv(in.Outputs, p.BlockOutputs)
	for i, what := range []string{"output tile blocks", "row tiles"} {
		if p.Grid[i] > dev.Limits.MaxWorkGroupCount[i] {
			return p, Limitf("%d %s exceed the device's %d workgroups on axis %d", p.Grid[i], what, dev.Limits.MaxWorkGroupCount[i], i)
		}
	}
	return p, nil
}

// planLinearCoopmat plans p on the cooperative-matrix kernel where the
// device has float16 matrices and X and W are both float16: each product
// is exact in float32 and the sums are float32, as on linear.comp.
func planLinearCoopmat(dev core.DeviceInfo, in LinearInput, p *LinearPlan) bool {
	mm := matrixSide(dev)
	if mm == 0 || in.X != core.Float16 || in.W != core.Float16 || in.Float32Products || in.Force == core.TexelLoadPath ||
		!dev.SubgroupSizeControl || !dev.FullSubgroups {
		return false
	}
	lim := dev.Limits
	sg, tile := int(lim.SubgroupSize), 2*mm
	wg := (tile / mm) * (tile / mm) * sg
	if wg > min(int(lim.MaxWorkGroupSize[0]), int(lim.MaxWorkGroupInvocations)) || tile*tile*(2+2+4) > int(lim.MaxSharedMemory) {
		return false
	}
	p.Variant = Variant{Family: FamilyLinearCoopmat, Path: core.StorageLoadPath}
	p.Path, p.Vec4, p.Matrix, p.SubgroupSize = core.StorageLoadPath, false, mm, sg
	p.Why = fmt.Sprintf("float16 X and W on the device's %dx%dx%d float16 cooperative matrices", mm, mm, mm)
	p.TileRows, p.TileCols, p.WorkGroup = tile, tile, wg
	return true
}

// groups is the grid of a block of rows and outputs: a workgroup per
// output tile on the matrices, a row of WorkGroup invocations' tiles on
// linear.comp.
func (p LinearPlan) groups(rows, outs int) [3]uint32 {
	colTiles := (outs + p.TileCols - 1) / p.TileCols
	rowTiles := (rows + p.TileRows - 1) / p.TileRows
	if p.Matrix > 0 {
		return [3]uint32{uint32(colTiles), uint32(rowTiles), 1}
	}
	return [3]uint32{uint32((colTiles + p.WorkGroup - 1) / p.WorkGroup), uint32(rowTiles), 1}
}

// RowLayout is where a matrix of row vectors lies in its buffer: row r
// starts at element Offset + r*Stride and is contiguous.
type RowLayout struct{ Offset, Stride int }

// LinearShape is one dense layer Y = X W^T + b in kernel terms, without
// its buffers: X is (Rows, Inputs), W (Outputs, Inputs) in PyTorch's
// (out, in) layout, Y (Rows, Outputs), the bias (if Bias) Outputs floats
// from element BiasOffset.
type LinearShape struct {
	Rows, Outputs, Inputs int
	X, W, Y               RowLayout
	Bias                  bool
	BiasOffset            int
}

// linearFlagBias in P.dims.w: the layer adds its bias (LFLAG_BIAS of the
// generated interface.glsl).
const linearFlagBias = 1

// Kernel is the kernel of a dense-layer plan.
func (p LinearPlan) Kernel() KernelSpec {
	if p.Matrix > 0 {
		spec := linearCoopSpec{WorkGroup: int32(p.WorkGroup), MM: int32(p.Matrix), Tile: int32(p.TileRows), SG: int32(p.SubgroupSize)}.constants()
		return KernelSpec{Variant: p.Variant, Bindings: linearBindingTypes(p), Subgroup: uint32(p.SubgroupSize), Spec: spec}
	}
	spec := linearSpec{WorkGroup: int32(p.WorkGroup), XType: typeSpec(p.X), WType: typeSpec(p.W)}.constants()
	return KernelSpec{Variant: p.Variant, Bindings: linearBindingTypes(p), Spec: spec}
}

// linearSpans are the element ranges of X, W, Y and bias that the block of
// rows [r0, r0+nr) and outputs [o0, o0+no) touches.
func linearSpans(x *LinearShape, r0, nr, o0, no int) [4]span {
	row := func(v RowLayout, first, n, width int) span {
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
func linearBlocks(dev core.DeviceInfo, p LinearPlan, x *LinearShape) (rows, outs int, err error) {
	texel := p.Path == core.TexelLoadPath
	fit := func(nr, no int) error {
		sp := linearSpans(x, 0, nr, 0, no)
		for i, what := range []string{"X", "W", "Y", "bias"} {
			if i == 3 && !x.Bias {
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
		return 0, 0, Limitf("dense layer (%d x %d) x (%d x %d)^T: even one tile does not fit a binding: %v", x.Rows, x.Inputs, x.Outputs, x.Inputs, err)
	}
	return rows, outs, nil
}

// LinearBlock is one block of a dense layer as bound: the windows of X,
// W, Y and the bias (nil where the layer has none), its parameter block
// and its grid.
type LinearBlock struct {
	Windows [4]*Window
	Params  []byte
	Groups  [3]uint32
}

// EachBlock calls f with each block of the layer x as p bound it, in order.
func (p LinearPlan) EachBlock(dev core.DeviceInfo, x *LinearShape, f func(LinearBlock) error) error {
	rows, outs := p.BlockRows, p.BlockOutputs
	if rows <= 0 || outs <= 0 {
		return fmt.Errorf("pipelines: dense layer plan without its blocks (PlanLinear makes them)")
	}
	for r0 := 0; r0 < x.Rows; r0 += rows {
		for o0 := 0; o0 < x.Outputs; o0 += outs {
			b, err := p.bindBlock(dev, x, r0, min(rows, x.Rows-r0), o0, min(outs, x.Outputs-o0))
			if err == nil {
				err = f(b)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// bindBlock binds the block of rows [r0, r0+nr) and outputs [o0, o0+no).
func (p LinearPlan) bindBlock(dev core.DeviceInfo, x *LinearShape, r0, nr, o0, no int) (LinearBlock, error) {
	var b LinearBlock
	texel := p.Path == core.TexelLoadPath
	sp := linearSpans(x, r0, nr, o0, no)
	var first [4]int
	for i := range sp {
		if i == 3 && !x.Bias {
			continue
		}
		w, err := bindWindow(dev, []string{"X", "W", "Y", "bias"}[i], sp[i], texel && i < 2, p.Vec4 && i < 2, p.types()[i])
		if err != nil {
			return b, err
		}
		b.Windows[i], first[i] = &Window{Binding: linearBindingOf[i], Offset: w.offset, Size: w.size}, w.first
	}
	flags := 0
	if x.Bias {
		flags |= linearFlagBias
	}
	b.Params = encodeBlock(linearParams{
		Dims: ivec4(nr, no, x.Inputs, flags),
		X:    ivec4(sp[0].lo-first[0], x.X.Stride, 0, 0),
		W:    ivec4(sp[1].lo-first[1], x.W.Stride, 0, 0),
		Y:    ivec4(sp[2].lo-first[2], x.Y.Stride, sp[3].lo-first[3], 0),
	})
	b.Groups = p.groups(nr, no)
	return b, nil
}

// linearBindingOf is the binding of X, W, Y and the bias.
var linearBindingOf = [4]int{linearBindX, linearBindW, linearBindY, linearBindBias}

// linearBindingTypes are the dense layer's bindings: Params, X, W (texel
// views on the texel path), bias, Y.
func linearBindingTypes(p LinearPlan) []core.BindingType {
	b := make([]core.BindingType, linearBindY+1)
	for i := range b {
		b[i] = core.StorageBuffer
	}
	b[LinearBindParams] = core.UniformBuffer
	if p.Path == core.TexelLoadPath {
		b[linearBindX], b[linearBindW] = texelBinding(p.X, p.Vec4), texelBinding(p.W, p.Vec4)
	}
	return b
}

// headMeanBindingTypes are the head mean's bindings: weights, mean.
func headMeanBindingTypes() []core.BindingType {
	return []core.BindingType{headMeanBindW: core.StorageBuffer, headMeanBindMean: core.StorageBuffer}
}

// HeadMeanKernel is the mean over heads of attention weights.
func HeadMeanKernel() KernelSpec {
	return KernelSpec{Variant: Variant{Family: FamilyHeadMean}, Bindings: headMeanBindingTypes(), Push: blockSize(HeadMeanPush{})}
}
