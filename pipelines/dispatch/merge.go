package dispatch

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// MergePart is one partial attention of a merge: its float32 O rows and
// LSE values, each at an element offset with strides over (B, heads, L).
type MergePart struct {
	O, LSE               *vk.Buffer
	OOffset, LSEOffset   int
	OStrides, LSEStrides [3]int
}

// MergeArgs are the parts of a merge (attention_merge.comp) and its
// outputs: O, dense float32 (B, Heads, L, DV), and LSE, dense (B, Heads,
// L); Sums is float32 scratch of 2 per row plus one per element of O (the
// compensated sums).
type MergeArgs struct {
	Parts          []MergePart
	B, Heads, L, D int // D: the width of O's rows (d_v)
	O, LSE, Sums   *vk.Buffer
}

// MergeSums is how many floats MergeArgs.Sums holds for rows rows of O of
// width d.
func MergeSums(rows, d int) int { return rows * (2 + d) }

// Merge binds the merge of a.Parts (at least one) into a.O and a.LSE: a
// maximum pass and a sum pass per part (one invocation per row), an O pass
// per part (one per element), then one pass that makes the LSE (see
// attention_merge.comp).
func (ks *Kernels) Merge(a MergeArgs) (*Step, error) {
	dev := ks.dev.Info.DeviceInfo
	if len(a.Parts) == 0 {
		return nil, pipelines.Limitf("a merge of no parts")
	}
	bufs := []rowBuffer{{"merged O", a.O, core.Float32}, {"merged LSE", a.LSE, core.Float32}}
	for _, p := range a.Parts {
		bufs = append(bufs, rowBuffer{"a part's O", p.O, core.Float32}, rowBuffer{"a part's LSE", p.LSE, core.Float32})
	}
	elems, err := checkRows(dev, "merge", [4]int{a.B, a.Heads, a.L, a.D}, bufs...)
	if err != nil {
		return nil, err
	}
	k, err := ks.kernel(pipelines.MergeKernel())
	if err != nil {
		return nil, err
	}
	rows := a.B * a.Heads * a.L
	st := &Step{}
	for pass, n := range []int{rows, rows, elems, rows} {
		cols, gridRows, err := pipelines.Grid(dev, "merge", n)
		if err != nil {
			st.Close()
			return nil, err
		}
		parts := a.Parts
		if pass == 3 {
			parts = parts[:1] // the LSE once, from the maximum and the sum
		}
		for i, p := range parts {
			set, err := ks.bind(k, p.O, p.LSE, a.O, a.LSE, a.Sums)
			if err != nil {
				st.Close()
				return nil, err
			}
			st.own(set)
			first := 0
			if i == 0 {
				first = 1
			}
			push := pipelines.MergePush{
				Pass: int32(pass), First: int32(first), Heads: int32(a.Heads), L: int32(a.L), DV: int32(a.D),
				Total: int32(n), RowPitch: int32(cols * pipelines.ElementWorkGroup),
				OOffset: int32(p.OOffset), OStrideB: int32(p.OStrides[0]), OStrideH: int32(p.OStrides[1]), OStrideL: int32(p.OStrides[2]),
				LseOffset: int32(p.LSEOffset), LseStrideB: int32(p.LSEStrides[0]), LseStrideH: int32(p.LSEStrides[1]), LseStrideL: int32(p.LSEStrides[2]),
			}.Bytes()
			st.dispatches = append(st.dispatches, dispatch{kernel: k, set: set, groups: [3]uint32{uint32(cols), uint32(gridRows), 1}, push: push})
		}
	}
	return st, nil
}
