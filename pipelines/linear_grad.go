package pipelines

import (
	"fmt"

	"github.com/vkattn/vkattn/core"
)

// GradOperand is where one operand of a gradient product lies in its
// buffer: element (r, k), r along the product's rows (A) or columns (B)
// and k along its sum, at Offset + r*RowStride + k*KStride, stored as
// Type.
type GradOperand struct {
	Offset, RowStride, KStride int
	Type                       core.DType
}

// GradShape is one product of a dense layer's backward pass, C = A B^T
// (+ C), in kernel terms without its buffers: C[m, n] = sum over k < K of
// A[m, k] B[n, k], with C's rows Stride apart and contiguous. For Y = X
// W^T + b and its gradient dY (tokens, outputs), dX = dY W has A = dY
// (KStride 1) and B = W (RowStride 1, KStride inputs), and dW = dY^T X
// has A = dY (RowStride 1, KStride outputs) and B = X (RowStride 1,
// KStride inputs): A is contiguous along k or along m, B along n.
// Accumulate adds the product to C.
type GradShape struct {
	M, N, K    int
	A, B       GradOperand
	C          RowLayout
	Accumulate bool
}

// GradPlan is what the planner chose for a gradient product: the
// variant and load path, how A is read, the workgroup, and the blocks of
// C and of the sum one dispatch computes (a block of k adds to C).
type GradPlan struct {
	Variant   Variant
	Path      core.LoadPath
	Vec4      bool
	WorkGroup int
	Why       string     // why this load path
	A, B      core.DType // the operands' element types
	// ARows: A is read along m (GFLAG_A_ROWS), not along k.
	ARows bool
	// BlockM x BlockN of C over BlockK of the sum per dispatch: the whole
	// product where it fits one binding and the device's loop budget,
	// Blocks of them where not (the blocks of k of one block of C run in
	// order, each adding to C).
	BlockM, BlockN, BlockK, Blocks int
}

func (p GradPlan) String() string {
	loads := "scalar loads"
	if p.Vec4 {
		loads = "vec4 loads"
	}
	read := "along k"
	if p.ARows {
		read = "along its rows"
	}
	blocks := ""
	if p.Blocks > 1 {
		blocks = fmt.Sprintf(", in %d blocks of %d x %d over %d of the sum", p.Blocks, p.BlockM, p.BlockN, p.BlockK)
	}
	return fmt.Sprintf("kernel %s (load path %s: %s; %s%s; A read %s), 4x4 tile of C per invocation, workgroup %d%s",
		p.Variant, p.Path, p.Why, loads, typesNote([]string{"A", "B"}, p.A, p.B), read, p.WorkGroup, blocks)
}

// gradTile is the block of C (rows and columns) an invocation computes
// and the k a step of its loop adds: linear_grad.comp's TR, TC and 4.
const gradTile = 4

// Flag bits of P.dims.w (GFLAG_* of the generated interface.glsl).
const (
	gradFlagARows      = 1
	gradFlagAccumulate = 2
)

// PlanGrad plans the gradient product s on dev: force and tuning choose
// the load path and workgroup as for the forward's dense layers.
func PlanGrad(dev core.DeviceInfo, s GradShape, force core.LoadPath, tuning *core.Tuning) (GradPlan, error) {
	var p GradPlan
	if s.M <= 0 || s.N <= 0 || s.K <= 0 {
		return p, Limitf("gradient product of %d x %d over %d: all must be at least 1", s.M, s.N, s.K)
	}
	if !s.A.Type.Valid() || !s.B.Type.Valid() {
		return p, fmt.Errorf("gradient product: element types %v and %v; the kernel reads %v", s.A.Type, s.B.Type, DTypes)
	}
	switch {
	case s.A.KStride == 1 || s.K == 1:
	case s.A.RowStride == 1 || s.M == 1:
		p.ARows = true
	default:
		return p, fmt.Errorf("gradient product: A (row stride %d, k stride %d) is contiguous along neither", s.A.RowStride, s.A.KStride)
	}
	if s.B.RowStride != 1 && s.N > 1 {
		return p, fmt.Errorf("gradient product: B's row stride is %d, not 1", s.B.RowStride)
	}
	path, tuning2, why, err := choosePath(dev, force, tuning)
	if err != nil {
		return p, err
	}
	p.Path, p.Why, p.A, p.B = path, why, s.A.Type, s.B.Type
	p.Vec4 = s.aligned(p.ARows) && (p.Path == core.StorageLoadPath || dev.TexelWords4)
	p.Variant = Variant{Family: FamilyLinearGrad, Path: p.Path, Vec4: p.Vec4}
	p.WorkGroup = min(tuning2.WorkGroup, int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations))
	if p.BlockM, p.BlockN, p.BlockK, err = p.blocks(dev, &s); err != nil {
		return p, err
	}
	p.Blocks = ceilDiv(s.M, p.BlockM) * ceilDiv(s.N, p.BlockN) * ceilDiv(s.K, p.BlockK)
	return p, nil
}

// aligned reports whether the operands can be read as vec4s: their
// offsets and strides, and the widths they are read along, multiples of 4
// (so a vec4 never straddles a row's end).
func (s *GradShape) aligned(aRows bool) bool {
	m4 := func(xs ...int) bool {
		for _, x := range xs {
			if x%4 != 0 {
				return false
			}
		}
		return true
	}
	a := m4(s.A.Offset, s.A.RowStride, s.K)
	if aRows {
		a = m4(s.A.Offset, s.A.KStride, s.M)
	}
	return a && m4(s.B.Offset, s.B.KStride, s.N)
}

// gradSpans are the element ranges of A, B and C that the block of rows
// [m0, m0+nm), columns [n0, n0+nn) and sums [k0, k0+nk) touches.
func gradSpans(s *GradShape, m0, nm, n0, nn, k0, nk int) [3]span {
	op := func(o GradOperand, r0, nr int) span {
		lo := o.Offset + r0*o.RowStride + k0*o.KStride
		return span{lo, lo + (nr-1)*o.RowStride + (nk-1)*o.KStride + 1}
	}
	c := s.C.Offset + m0*s.C.Stride + n0
	return [3]span{op(s.A, m0, nm), op(s.B, n0, nn), {c, c + (nm-1)*s.C.Stride + nn}}
}

// groups is the grid of a block of nm rows and nn columns.
func (p GradPlan) groups(nm, nn int) [3]uint32 {
	cols := ceilDiv(nn, gradTile)
	return [3]uint32{uint32(ceilDiv(cols, p.WorkGroup)), uint32(ceilDiv(nm, gradTile)), 1}
}

// blocks picks the block sizes: the whole product if it fits, else
// blocks of the sum (also to keep each invocation within the device's
// loop budget), then of C's columns and rows, halved in whole tiles until
// every window fits a binding and the grid the device's.
func (p GradPlan) blocks(dev core.DeviceInfo, s *GradShape) (nm, nn, nk int, err error) {
	texel := p.Path == core.TexelLoadPath
	fit := func(nm, nn, nk int) error {
		sp := gradSpans(s, 0, nm, 0, nn, 0, nk)
		for i, what := range []string{"A", "B", "C"} {
			t := [3]core.DType{p.A, p.B, core.Float32}[i]
			if _, err := bindWindow(dev, what, sp[i], texel && i < 2, p.Vec4 && i < 2, t); err != nil {
				return err
			}
		}
		g := p.groups(nm, nn)
		for a := 0; a < 2; a++ {
			if g[a] > dev.Limits.MaxWorkGroupCount[a] {
				return Limitf("%d workgroups on axis %d, beyond the device's %d", g[a], a, dev.Limits.MaxWorkGroupCount[a])
			}
		}
		return nil
	}
	halve := func(n int) int { return (n/2 + gradTile - 1) / gradTile * gradTile }
	nm, nn, nk = s.M, s.N, s.K
	if budget := dev.LoopBudget(); budget > 0 && linearLoops(nk) > budget {
		nk = budget * gradTile
	}
	one := func(n int) int { return min(n, gradTile) }
	for nk > gradTile && fit(one(nm), one(nn), nk) != nil {
		nk = halve(nk)
	}
	for nn > gradTile && fit(one(nm), nn, nk) != nil {
		nn = halve(nn)
	}
	for nm > gradTile && fit(nm, nn, nk) != nil {
		nm = halve(nm)
	}
	if err := fit(nm, nn, nk); err != nil {
		return 0, 0, 0, Limitf("gradient product (%d x %d over %d): even one tile does not fit: %v", s.M, s.N, s.K, err)
	}
	return nm, nn, nk, nil
}

// Kernel is the kernel of a gradient product's plan.
func (p GradPlan) Kernel() KernelSpec {
	spec := gradSpec{WorkGroup: int32(p.WorkGroup), AType: typeSpec(p.A), BType: typeSpec(p.B)}.constants()
	return KernelSpec{Variant: p.Variant, Bindings: gradBindingTypes(p), Spec: spec}
}

// gradBindingTypes are linear_grad.comp's bindings: Params, A and B
// (texel views on the texel path), C.
func gradBindingTypes(p GradPlan) []core.BindingType {
	b := []core.BindingType{GradBindParams: core.UniformBuffer, gradBindA: core.StorageBuffer, gradBindB: core.StorageBuffer, gradBindC: core.StorageBuffer}
	if p.Path == core.TexelLoadPath {
		b[gradBindA], b[gradBindB] = texelBinding(p.A, p.Vec4), texelBinding(p.B, p.Vec4)
	}
	return b
}

// GradBlock is one dispatch of a gradient product as bound: the windows
// of A, B and C, its parameter block and its grid.
type GradBlock struct {
	Windows [3]*Window
	Params  []byte
	Groups  [3]uint32
}

// EachBlock calls f with each block of the product s as p bound it, in
// order: for each block of C, its blocks of the sum in order.
func (p GradPlan) EachBlock(dev core.DeviceInfo, s *GradShape, f func(GradBlock) error) error {
	if p.BlockM <= 0 || p.BlockN <= 0 || p.BlockK <= 0 {
		return fmt.Errorf("pipelines: gradient product plan without its blocks (PlanGrad makes them)")
	}
	for m0 := 0; m0 < s.M; m0 += p.BlockM {
		for n0 := 0; n0 < s.N; n0 += p.BlockN {
			for k0 := 0; k0 < s.K; k0 += p.BlockK {
				b, err := p.bindBlock(dev, s, m0, min(p.BlockM, s.M-m0), n0, min(p.BlockN, s.N-n0), k0, min(p.BlockK, s.K-k0))
				if err == nil {
					err = f(b)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// bindBlock binds the block of rows [m0, m0+nm), columns [n0, n0+nn) and
// sums [k0, k0+nk).
func (p GradPlan) bindBlock(dev core.DeviceInfo, s *GradShape, m0, nm, n0, nn, k0, nk int) (GradBlock, error) {
	var b GradBlock
	texel := p.Path == core.TexelLoadPath
	sp := gradSpans(s, m0, nm, n0, nn, k0, nk)
	var at [3]int // each span's first element, in its window
	for i, what := range []string{"A", "B", "C"} {
		t := [3]core.DType{p.A, p.B, core.Float32}[i]
		w, err := bindWindow(dev, what, sp[i], texel && i < 2, p.Vec4 && i < 2, t)
		if err != nil {
			return b, err
		}
		b.Windows[i] = &Window{Binding: []int{gradBindA, gradBindB, gradBindC}[i], Offset: w.offset, Size: w.size}
		at[i] = sp[i].lo - w.first
	}
	flags := 0
	aStride := s.A.RowStride
	if p.ARows {
		flags |= gradFlagARows
		aStride = s.A.KStride
	}
	if s.Accumulate || k0 > 0 {
		flags |= gradFlagAccumulate
	}
	b.Params = encodeBlock(gradParams{
		Dims: ivec4(nm, nn, nk, flags),
		A:    ivec4(at[0], aStride, 0, 0),
		B:    ivec4(at[1], s.B.KStride, 0, 0),
		C:    ivec4(at[2], s.C.Stride, 0, 0),
	})
	b.Groups = p.groups(nm, nn)
	return b, nil
}
