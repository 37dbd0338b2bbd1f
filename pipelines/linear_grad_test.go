package pipelines

import (
	"encoding/binary"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// paramInts decodes a parameter or push-constant block.
func paramInts(b []byte) []int {
	out := make([]int, len(b)/4)
	for i := range out {
		out[i] = int(int32(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

// A gradient product reads vec4s only where every operand's offset,
// stride and width along its reads is a multiple of 4; A is read along k
// (dX = dY W) or along its rows (dW = dY^T X), and one contiguous along
// neither is refused.
func TestPlanGradLoads(t *testing.T) {
	dev := lavapipeLike()
	dW := GradShape{M: 8, N: 12, K: 6, A: GradOperand{RowStride: 1, KStride: 8}, B: GradOperand{RowStride: 1, KStride: 12}, C: RowLayout{Stride: 12}}
	dX := GradShape{M: 6, N: 12, K: 8, A: GradOperand{RowStride: 8, KStride: 1}, B: GradOperand{RowStride: 1, KStride: 12}, C: RowLayout{Stride: 12}}
	odd := dX
	odd.N, odd.B.KStride, odd.C.Stride = 10, 10, 10
	for _, c := range []struct {
		name        string
		s           GradShape
		vec4, aRows bool
	}{{"dW", dW, true, true}, {"dX", dX, true, false}, {"dX of 10 inputs", odd, false, false}} {
		p, err := PlanGrad(dev, c.s, core.AutoLoadPath, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.Vec4 != c.vec4 || p.ARows != c.aRows || p.Blocks != 1 || p.Path != core.TexelLoadPath {
			t.Errorf("%s: planned %v (vec4 %v, A along rows %v, %d blocks), want vec4 %v, A along rows %v, one block on texels", c.name, p, p.Vec4, p.ARows, p.Blocks, c.vec4, c.aRows)
		}
	}
	neither := dW
	neither.A.RowStride = 2
	if _, err := PlanGrad(dev, neither, core.AutoLoadPath, nil); err == nil {
		t.Error("A contiguous along neither axis was planned")
	}
}

// On a device that ends long loops (lavapipe before Mesa 26), a product
// whose sum is longer than an invocation may loop runs as blocks of the
// sum, the later ones adding to C; so does a sum of rows on regroup.comp.
func TestGradBlocksKeepTheLoopBudget(t *testing.T) {
	dev := lavapipeLike()
	budget := dev.LoopBudget()
	if budget == 0 {
		t.Fatal("the fake lavapipe has no loop budget")
	}
	rows := 4*budget + 100
	s := GradShape{M: 4, N: 4, K: rows, A: GradOperand{RowStride: 1, KStride: 4}, B: GradOperand{RowStride: 1, KStride: 4}, C: RowLayout{Stride: 4}}
	p, err := PlanGrad(dev, s, core.AutoLoadPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ks, accumulate []int
	if err := p.EachBlock(dev, &s, func(b GradBlock) error {
		v := paramInts(b.Params)
		ks, accumulate = append(ks, v[2]), append(accumulate, v[3]&gradFlagAccumulate)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ks) != 2 || ks[0] > 4*budget || ks[0]+ks[1] != rows || accumulate[0] != 0 || accumulate[1] == 0 {
		t.Errorf("a sum of %d rows ran as blocks of %v (accumulate flags %v), want 2 within %d, the second adding", rows, ks, accumulate, 4*budget)
	}

	sum := RegroupShape{N: [4]int{1, 1, budget + 7, 3}, SrcType: core.Float32, Sum: true, Src: RegroupView{Strides: [3]int{0, 0, 3}}}
	var blocks [][]int
	if err := EachRegroupBlock(dev, &sum, func(b RegroupBlock) error {
		blocks = append(blocks, paramInts(b.Push))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0][2] != budget || blocks[1][2] != 7 || blocks[0][12] != regroupFlagSum || blocks[1][12] != regroupFlagSum|regroupFlagAccumulate {
		t.Errorf("column sums over %d rows ran as %v, want %d rows then 7 added", budget+7, blocks, budget)
	}
}
