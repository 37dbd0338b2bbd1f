package pipelines

import (
	"fmt"

	"github.com/vkattn/vkattn/core"
)

// RegroupView is where a 4-d array (i0, i1, i2, j) lies in a buffer:
// element (i0, i1, i2, j) at Offset + i0*Strides[0] + i1*Strides[1] +
// i2*Strides[2] + j, j contiguous.
type RegroupView struct {
	Offset  int
	Strides [3]int
}

// RegroupShape is a move or a sum of a layer's backward pass in kernel
// terms (regroup.comp), without its buffers: over the extents N (i0, i1,
// i2, j), Dst (+)= Src element by element, or with Sum, Dst[i0, i1, j]
// (+)= the sum over i2 of Src[i0, i1, i2, j] (Dst's i2 stride unused).
// Src is read as SrcType; Dst is float32. Accumulate adds to Dst.
type RegroupShape struct {
	N               [4]int
	Src, Dst        RegroupView
	SrcType         core.DType
	Sum, Accumulate bool
}

// Flag bits of P.flags (RFLAG_* of the generated interface.glsl).
const (
	regroupFlagSum        = 1
	regroupFlagAccumulate = 2
)

// regroupWorkGroup is regroup.comp's workgroup size.
const regroupWorkGroup = 64

// RegroupBlock is one dispatch of a regroup as bound: the windows of Src
// and Dst, its push constants and grid.
type RegroupBlock struct {
	Windows [2]*Window
	Push    []byte
	Groups  [3]uint32
}

// RegroupKernel is regroup.comp reading a source of type t.
func RegroupKernel(t core.DType) KernelSpec {
	spec := regroupSpec{WorkGroup: regroupWorkGroup, SrcType: typeSpec(t)}.constants()
	return KernelSpec{Variant: Variant{Family: FamilyRegroup}, Bindings: regroupBindingTypes(), Spec: spec, Push: blockSize(regroupPush{})}
}

// regroupBindingTypes are regroup.comp's bindings: Src, Dst.
func regroupBindingTypes() []core.BindingType {
	return []core.BindingType{regroupBindSrc: core.StorageBuffer, regroupBindDst: core.StorageBuffer}
}

// regroupSpans are the element ranges of Src and Dst that i0 in [a0,
// a0+na) and i2 in [c0, c0+nc) touch.
func regroupSpans(s *RegroupShape, a0, na, c0, nc int) [2]span {
	view := func(v RegroupView, i2 int) span {
		lo := v.Offset + a0*v.Strides[0] + c0*i2
		return span{lo, lo + (na-1)*v.Strides[0] + (s.N[1]-1)*v.Strides[1] + (nc-1)*i2 + s.N[3]}
	}
	dst := s.Dst.Strides[2]
	if s.Sum {
		dst = 0
	}
	return [2]span{view(s.Src, s.Src.Strides[2]), view(s.Dst, dst)}
}

// EachRegroupBlock calls f with each dispatch of s on dev, in order:
// blocks of i0 and of i2 where the windows would not fit a binding, the
// grid the device's, or (summing) an invocation's loop the device's loop
// budget; a sum's later blocks of i2 add to Dst.
func EachRegroupBlock(dev core.DeviceInfo, s *RegroupShape, f func(RegroupBlock) error) error {
	for _, n := range s.N {
		if n <= 0 {
			return Limitf("regroup over %v: every extent must be at least 1", s.N)
		}
	}
	if !s.SrcType.Valid() {
		return fmt.Errorf("regroup: source type %v; the kernel reads %v", s.SrcType, DTypes)
	}
	lim := dev.Limits.MaxWorkGroupCount
	groups := func(na, nc int) [3]uint32 {
		x := nc * s.N[3]
		if s.Sum {
			x = s.N[3]
		}
		return [3]uint32{uint32(ceilDiv(x, regroupWorkGroup)), uint32(s.N[1]), uint32(na)}
	}
	fit := func(na, nc int) error {
		g := groups(na, nc)
		for a := range g {
			if g[a] > lim[a] {
				return Limitf("%d workgroups on axis %d, beyond the device's %d", g[a], a, lim[a])
			}
		}
		for i, sp := range regroupSpans(s, 0, na, 0, nc) {
			t := [2]core.DType{s.SrcType, core.Float32}[i]
			if _, err := bindWindow(dev, []string{"source", "destination"}[i], sp, false, false, t); err != nil {
				return err
			}
		}
		return nil
	}
	na, nc := s.N[0], s.N[2]
	if budget := dev.LoopBudget(); s.Sum && budget > 0 && nc > budget {
		nc = budget
	}
	for na > 1 && fit(na, min(nc, 1)) != nil {
		na = (na + 1) / 2
	}
	for nc > 1 && fit(na, nc) != nil {
		nc = (nc + 1) / 2
	}
	if err := fit(na, nc); err != nil {
		return Limitf("regroup over %v: even one row does not fit: %v", s.N, err)
	}
	for a0 := 0; a0 < s.N[0]; a0 += na {
		for c0 := 0; c0 < s.N[2]; c0 += nc {
			b, err := bindRegroup(dev, s, a0, min(na, s.N[0]-a0), c0, min(nc, s.N[2]-c0), groups)
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

// bindRegroup binds the block of i0 in [a0, a0+na) and i2 in [c0, c0+nc).
func bindRegroup(dev core.DeviceInfo, s *RegroupShape, a0, na, c0, nc int, groups func(int, int) [3]uint32) (RegroupBlock, error) {
	var b RegroupBlock
	var at [2]int
	for i, sp := range regroupSpans(s, a0, na, c0, nc) {
		t := [2]core.DType{s.SrcType, core.Float32}[i]
		w, err := bindWindow(dev, []string{"source", "destination"}[i], sp, false, false, t)
		if err != nil {
			return b, err
		}
		b.Windows[i] = &Window{Binding: []int{regroupBindSrc, regroupBindDst}[i], Offset: w.offset, Size: w.size}
		at[i] = sp.lo - w.first
	}
	flags := 0
	if s.Sum {
		flags |= regroupFlagSum
	}
	if s.Accumulate || (s.Sum && c0 > 0) {
		flags |= regroupFlagAccumulate
	}
	b.Push = encodeBlock(regroupPush{
		N:     ivec4(na, s.N[1], nc, s.N[3]),
		Src:   ivec4(at[0], s.Src.Strides[0], s.Src.Strides[1], s.Src.Strides[2]),
		Dst:   ivec4(at[1], s.Dst.Strides[0], s.Dst.Strides[1], s.Dst.Strides[2]),
		Flags: int32(flags),
	})
	b.Groups = groups(na, nc)
	return b, nil
}
