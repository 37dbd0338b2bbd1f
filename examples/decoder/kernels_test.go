package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	vulkan "github.com/vulkan-go/vulkan"
)

// u is float32's unit roundoff, 2^-24: the relative error of one rounding.
const u = 0x1p-24

// kernelRig is a host with the kernels, for the kernel tests.
type kernelRig struct {
	t  *testing.T
	h  *Host
	ks *Kernels
}

func newKernelRig(t *testing.T) *kernelRig {
	h, err := NewHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	ks, err := h.NewKernels()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device: %s", h.Name)
	return &kernelRig{t: t, h: h, ks: ks}
}

// buffer makes a storage buffer holding xs (at least n floats).
func (r *kernelRig) buffer(xs []float32, n int) *Buffer {
	r.t.Helper()
	b, err := r.h.NewBuffer(uint64(4*max(len(xs), n, 1)), StorageUsage)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := b.Write(xs); err != nil {
		r.t.Fatal(err)
	}
	return b
}

// run records one dispatch of k over bufs and waits for it.
func (r *kernelRig) run(k *Kernel, push []uint32, groups int, bufs ...*Buffer) {
	r.t.Helper()
	b, err := r.h.Bind(k, bufs...)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.h.Begin(); err != nil {
		r.t.Fatal(err)
	}
	if err := r.h.Dispatch(b, push, groups); err != nil {
		r.t.Fatal(err)
	}
	r.h.Barrier(vulkan.PipelineStageHostBit, vulkan.AccessHostReadBit)
	if err := r.h.Submit(); err != nil {
		r.t.Fatal(err)
	}
}

func normals(rng *rand.Rand, n int, scale float64) []float32 {
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * scale)
	}
	return xs
}

// worst tracks a comparison: the largest error as a fraction of its bound.
type worst struct {
	ratio float64
	at    string
}

// check fails t where |got - want| > bound (or either is NaN) and keeps
// the worst ratio.
func (w *worst) check(t *testing.T, what string, got float32, want, bound float64) {
	t.Helper()
	diff := math.Abs(float64(got) - want)
	if !(diff <= bound) {
		t.Errorf("%s: got %.9g, want %.9g (difference %.3g, bound %.3g)", what, got, want, diff, bound)
	}
	if r := diff / bound; r > w.ratio {
		w.ratio, w.at = r, what
	}
}

// TestKernelsMatchFloat64 checks each of the host's kernels on random
// inputs against plain float64 loops over the same float32 inputs, at
// bounds derived from float32 rounding (stated per kernel). The shapes
// include odd sizes (1, 3, 17, 129 ...) that leave workgroups partly
// idle. These checks do not involve vkattn or the model.
func TestKernelsMatchFloat64(t *testing.T) {
	if !inChild(t) {
		return
	}
	r := newKernelRig(t)
	rng := rand.New(rand.NewPCG(2024, 12))

	// The gather copies: exact.
	t.Run("embed", func(t *testing.T) {
		var w worst
		for _, c := range []struct{ rows, width, token int }{{256, 128, 0}, {256, 128, 1}, {256, 128, 255}, {5, 3, 4}, {3, 129, 2}} {
			table := normals(rng, c.rows*c.width, 0.5)
			token := r.buffer(nil, 1)
			token.Uints()[0] = uint32(c.token)
			x := r.buffer(nil, c.width)
			r.run(r.ks.Embed, []uint32{uint32(c.width), uint32(c.rows)}, groupsOf(c.width), token, r.buffer(table, 0), x)
			for i, got := range x.Floats()[:c.width] {
				w.check(t, fmt.Sprintf("rows %d width %d token %d [%d]", c.rows, c.width, c.token, i), got, float64(table[c.token*c.width+i]), 0)
			}
		}
	})

	// y_i = x_i r w_i, r = 1/sqrt(mean(x^2) + eps). The float32 sum of n
	// squares is within n u of the exact sum (each partial sum rounds once,
	// whatever the order), the square root halves that, inversesqrt is
	// within 2 ulp (Vulkan's bound) and the division, the addition of eps
	// and the two products round once each: relative error <= (n/2 + 8) u.
	t.Run("rmsnorm", func(t *testing.T) {
		var w worst
		const eps = 1e-5
		for _, n := range []int{1, 3, 17, 64, 128, 129, 300} {
			for _, scale := range []float64{1e-3, 1, 30} {
				xs, ws := normals(rng, n, scale), normals(rng, n, 0.1)
				for i := range ws {
					ws[i] += 1
				}
				y := r.buffer(nil, n)
				r.run(r.ks.RMSNorm, []uint32{uint32(n), math.Float32bits(eps)}, 1, r.buffer(xs, 0), r.buffer(ws, 0), y)
				var ss float64
				for _, x := range xs {
					ss += float64(x) * float64(x)
				}
				rs := 1 / math.Sqrt(ss/float64(n)+float64(float32(eps)))
				rel := (float64(n)/2 + 8) * u
				for i, got := range y.Floats()[:n] {
					want := float64(xs[i]) * rs * float64(ws[i])
					w.check(t, fmt.Sprintf("n %d scale %g [%d]", n, scale, i), got, want, rel*math.Abs(want))
				}
			}
		}
		t.Logf("worst error %.3f of its bound (at %s)", w.ratio, w.at)
	})

	// y_r = (y_r if accumulating) + sum_c W_rc x_c. A float32 sum of k
	// terms in any order is within (k-1) u sum |terms| of the exact sum,
	// and each product rounds once: |error| <= (cols + 1) u (sum_c |W_rc
	// x_c| + |y_r|).
	t.Run("matvec", func(t *testing.T) {
		var w worst
		for _, c := range []struct{ rows, cols int }{{1, 1}, {3, 17}, {32, 128}, {128, 128}, {129, 65}, {256, 128}, {128, 256}} {
			for _, acc := range []bool{false, true} {
				ws, xs := normals(rng, c.rows*c.cols, 2/math.Sqrt(float64(c.cols))), normals(rng, c.cols, 1)
				y0 := normals(rng, c.rows, 3)
				y := r.buffer(y0, 0)
				flag := uint32(0)
				if acc {
					flag = 1
				}
				r.run(r.ks.MatVec, []uint32{uint32(c.rows), uint32(c.cols), flag}, groupsOf(c.rows), r.buffer(ws, 0), r.buffer(xs, 0), y)
				for row, got := range y.Floats()[:c.rows] {
					var want, mag float64
					if acc {
						want, mag = float64(y0[row]), math.Abs(float64(y0[row]))
					}
					for col := range c.cols {
						p := float64(ws[row*c.cols+col]) * float64(xs[col])
						want += p
						mag += math.Abs(p)
					}
					w.check(t, fmt.Sprintf("%dx%d accumulate %v row %d", c.rows, c.cols, acc, row), got, want, float64(c.cols+1)*u*mag)
				}
			}
		}
		t.Logf("worst error %.3f of its bound (at %s)", w.ratio, w.at)
	})

	// HF Llama's rotate_half at position p, angles from the formula in
	// float64 (not from the host's table): the table's cos and sin round
	// once each, the two products and the sum once each: |error| <= 3 u
	// (|x_i| + |x_{i+w/2}|), 4 u stated.
	t.Run("rope", func(t *testing.T) {
		var w worst
		const theta, positions = 10000.0, 64
		for _, c := range []struct{ heads, width int }{{8, 16}, {2, 16}, {3, 2}, {5, 6}} {
			table := r.buffer(ropeTable(positions, c.width, theta), 0)
			for _, pos := range []int{0, 1, 7, 30, positions - 1} {
				xs := normals(rng, c.heads*c.width, 3)
				x := r.buffer(xs, 0)
				half := c.width / 2
				r.run(r.ks.RoPE, []uint32{uint32(c.heads), uint32(c.width), uint32(pos)}, groupsOf(c.heads*half), x, table)
				got := x.Floats()
				for h := range c.heads {
					for i := range half {
						a := float64(pos) * math.Pow(theta, -2*float64(i)/float64(c.width))
						x0, x1 := float64(xs[h*c.width+i]), float64(xs[h*c.width+i+half])
						bound := 4 * u * (math.Abs(x0) + math.Abs(x1))
						what := fmt.Sprintf("heads %d width %d pos %d head %d pair %d", c.heads, c.width, pos, h, i)
						w.check(t, what+" first", got[h*c.width+i], x0*math.Cos(a)-x1*math.Sin(a), bound)
						w.check(t, what+" second", got[h*c.width+i+half], x1*math.Cos(a)+x0*math.Sin(a), bound)
					}
				}
			}
		}
		t.Logf("worst error %.3f of its bound (at %s)", w.ratio, w.at)
	})

	// silu(g) u = g / (1 + exp(-g)) u. Vulkan bounds exp's error by
	// 3 + 2|x| ulp and division by 2.5 ulp; with the sum and the product,
	// |error| <= (8 + 2|g|) u |want| for |g| below 80 (inputs up to 40
	// here, and -100 and 100, where exp overflows to +Inf or underflows,
	// compared at an absolute 1e-30).
	t.Run("swiglu", func(t *testing.T) {
		var w worst
		for _, n := range []int{1, 17, 256, 1000} {
			for _, scale := range []float64{0.1, 3, 20} {
				gs, us := normals(rng, n, scale), normals(rng, n, 1)
				if n > 3 {
					gs[0], gs[1], gs[2] = -100, 100, 0
				}
				out := r.buffer(nil, n)
				r.run(r.ks.SwiGLU, []uint32{uint32(n)}, groupsOf(n), r.buffer(gs, 0), r.buffer(us, 0), out)
				for i, got := range out.Floats()[:n] {
					g := float64(gs[i])
					want := g / (1 + math.Exp(-g)) * float64(us[i])
					bound := (8 + 2*math.Abs(g)) * u * math.Abs(want)
					if math.Abs(g) > 80 {
						bound = 1e-30 + 8*u*math.Abs(want)
					}
					w.check(t, fmt.Sprintf("n %d scale %g [%d] g %g", n, scale, i, g), got, want, bound)
				}
			}
		}
		t.Logf("worst error %.3f of its bound (at %s)", w.ratio, w.at)
	})
	if r.h.Submits != r.h.Waits {
		t.Errorf("%d submissions, %d waits", r.h.Submits, r.h.Waits)
	}
}
