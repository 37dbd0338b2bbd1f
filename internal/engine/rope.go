package engine

import (
	"math"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/pipelines/dispatch"
)

// RoPETable is the (cos, sin) table of r for rows of width dk, a table
// row per position of positions, in order.
func RoPETable(r *core.RoPE, dk int, positions []int) []float32 {
	rot := r.RotatedDims(dk)
	inv := r.InvFreq(rot)
	cs := make([]float32, len(positions)*rot)
	for i, p := range positions {
		core.CosSin(p, inv, cs[i*rot:(i+1)*rot])
	}
	return cs
}

// rotatedBound bounds the rotated rows of values bounded by b: a rotation
// keeps each pair's length, so an element reaches at most sqrt(2) b (and a
// float32 rounding more).
func rotatedBound(b float64) float64 { return b * math.Sqrt2 * (1 + 1e-6) }

// denseF32 is where a call's own dense float32 copy of a tensor of shape s
// lies: the rotated Q and K the attention reads.
func denseF32(s [4]int) pipelines.Layout { return pipelines.DenseLayout(s[0], s[1], s[2], s[3]) }

// rotated binds the rotation of x's rows by r into a float32 scratch tensor
// of the call and returns it: with lengths nil, table holds a row per row
// of x (batch item by batch item); with lengths (a KV cache's), table has a
// row per cache position and row t of item b is at t + lengths[b] - N.
func (b *Builder) rotated(x *Tensor, r *core.RoPE, table, lengths *Tensor) (*Tensor, error) {
	s := x.shape
	y, err := b.ScratchTensor(s)
	if err != nil {
		return nil, err
	}
	args := dispatch.RoPEArgs{
		X: x.buf, XType: x.dtype, XOffset: x.offset, XStrides: x.strides, Y: y.buf,
		B: s[0], Heads: s[1], N: s[2], D: s[3], Rot: r.RotatedDims(s[3]), Interleaved: r.Style == core.RoPEInterleaved,
		Table: table.buf,
	}
	if lengths != nil {
		args.Lengths = lengths.buf
	}
	if err := b.Add(b.d.kernels.RoPE(args)); err != nil {
		return nil, err
	}
	y.bound, y.finite = rotatedBound(x.magnitudeBound()), x.finite
	return y, nil
}

// rotateCall binds the rotations of a call's Q and K by opts.RoPE, at the
// positions of SEMANTICS.md §5 in the problem dm, and returns the copies
// its attention reads instead.
func (b *Builder) rotateCall(dm core.Dims, opts *core.Options, q, k *Tensor) (*Tensor, *Tensor, error) {
	r := opts.RoPE
	qPos := make([]int, 0, dm.B*dm.L)
	kPos := make([]int, 0, dm.B*dm.S)
	for i := 0; i < dm.B; i++ {
		for t := 0; t < dm.L; t++ {
			qPos = append(qPos, r.QueryPosition(opts, dm, i, t))
		}
		for j := 0; j < dm.S; j++ {
			kPos = append(kPos, r.KeyPosition(dm, i, j))
		}
	}
	var out [2]*Tensor
	for i, x := range []struct {
		t   *Tensor
		pos []int
	}{{q, qPos}, {k, kPos}} {
		cs := RoPETable(r, dm.DK, x.pos)
		table, err := b.upload(len(cs), func(h []float32) { copy(h, cs) })
		if err != nil {
			return nil, nil, err
		}
		if out[i], err = b.rotated(x.t, r, table, nil); err != nil {
			return nil, nil, err
		}
	}
	return out[0], out[1], nil
}
