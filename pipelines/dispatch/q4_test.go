package dispatch

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand"
	"os"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/vk"
)

// openKernels opens the default device (with the validation layer under
// VKATTN_VALIDATION=1) and its kernel library; cleanup closes both and
// fails the test on a validation message or a leaked object.
func openKernels(t *testing.T) (*vk.Device, *Kernels) {
	t.Helper()
	before, msgs := vk.LiveObjects(), len(vk.ValidationMessages())
	inst, dev, err := vk.OpenDefault(vk.InstanceConfig{Validation: os.Getenv("VKATTN_VALIDATION") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	ks := NewKernels(dev)
	t.Cleanup(func() {
		ks.Close()
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		inst.Close()
		if m := vk.ValidationMessages()[msgs:]; len(m) > 0 {
			t.Errorf("validation messages: %q", m)
		}
		if n := vk.LiveObjects(); n != before {
			t.Errorf("%d Vulkan objects live after closing, %d before", n, before)
		}
	})
	return dev, ks
}

// buffer makes a device buffer holding raw (rounded up to whole 16-byte
// texels, as quantized tensors are allocated); the test's cleanup frees
// it.
func buffer(t *testing.T, dev *vk.Device, raw []byte) *vk.Buffer {
	t.Helper()
	b, err := dev.NewBuffer(uint64(len(raw)+15) &^ 15)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Write(0, raw); err != nil {
		t.Fatal(err)
	}
	return b
}

// f32Bytes is xs as little-endian float32s.
func f32Bytes(xs []float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// q4Tensor is data, whole blocks, as a q4_0 tensor lies in its buffer:
// the quants' bytes, then the float16 scales; scales is where those start,
// in halves.
func q4Tensor(t *testing.T, data []float32) (raw []byte, scales int) {
	t.Helper()
	q, s, err := core.QuantizeQ4_0(data)
	if err != nil {
		t.Fatal(err)
	}
	raw = append([]byte(nil), q...)
	for _, h := range s {
		raw = binary.LittleEndian.AppendUint16(raw, h)
	}
	return raw, len(q) / 2
}

// run records steps, runs them once and frees them.
func run(t *testing.T, ks *Kernels, steps ...*Step) {
	t.Helper()
	pr, err := ks.Prepare(steps...)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if _, err := pr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// q4Blocks are blocks whose quants SEMANTICS.md §9.2 works out by hand
// (core's tests check the host on them): halves and the float32 sum
// rounding up, max's sign and its first occurrence, zeros and -0s, a
// scale rounding in float16, a float16 subnormal scale, the largest
// scale; then random blocks of several magnitudes.
func q4Blocks(r *rand.Rand) [][]float32 {
	block := func(xs ...float32) []float32 { return append(xs, make([]float32, 32-len(xs))...) }
	negZero := float32(math.Copysign(0, -1))
	bs := [][]float32{
		block(-8, 7, 7.49, 7.5, 8, -3.5, 2.5, -2.5, -0.5, 0.5, 0, negZero, -7.5, -7.51, 0.49999997, -0.50000006, 1.4999999),
		block(1, 0.75, -0.75, 4, 0, -4),
		block(1, 0.75, -0.75, -4, 0, 4),
		block(),
		block(negZero, negZero, negZero),
		block(-8*(1+0x1p-11), 4*(1+0x1p-11)),
		block(0, 0, 0, 0, 0, -8*0x1p-20, 3*0x1p-20),
		block(3, 524159.97, -2),
	}
	for i := range 8 {
		x := make([]float32, 32)
		for j := range x {
			x[j] = float32(r.NormFloat64() * math.Pow(10, float64(i%5-2)))
		}
		bs = append(bs, x)
	}
	return bs
}

// TestQ4StoreMatchesHost quantizes rows into q4_0 on the device
// (q8_store.comp, the q4_0 output type) and checks every quant byte and
// scale against core.QuantizeQ4_0, whose quants core's tests work out by
// hand: float32 rows read through strides, float16 rows, each row to its
// own destination row, the rows between left as they were.
func TestQ4StoreMatchesHost(t *testing.T) {
	dev, ks := openKernels(t)
	r := rand.New(rand.NewSource(40))
	blocks := q4Blocks(r)
	const heads, n, d, dstRows = 2, 4, 64, 11
	rows := heads * n
	if len(blocks) != rows*d/32 {
		t.Fatalf("%d blocks for %d rows of %d", len(blocks), rows, d)
	}
	// Row (h, t) is blocks 2r and 2r+1 (r = h*n + t); X stores rows as
	// (t, h) with a row of padding first: strides (B, heads, N) =
	// (n*heads*d, d, heads*d), offset d.
	x := make([]float32, d+rows*d)
	want := make([][]float32, rows)
	for h := range heads {
		for tt := range n {
			r := h*n + tt
			want[r] = append(append([]float32(nil), blocks[2*r]...), blocks[2*r+1]...)
			copy(x[d+(tt*heads+h)*d:], want[r])
		}
	}
	dst := []int{3, 0, 10, 7, 1, 8, 5, 2} // destination row of each row
	rowDst := make([]byte, 0, 4*rows)
	for _, r := range dst {
		rowDst = binary.LittleEndian.AppendUint32(rowDst, uint32(r*d))
	}
	for _, xt := range []core.DType{core.Float32, core.Float16} {
		t.Run(xt.String(), func(t *testing.T) {
			raw := f32Bytes(x)
			rowsWant := want
			if xt == core.Float16 {
				// The float16 rows are the random blocks rounded to
				// float16 (the hand-made ones do not all fit it).
				half := make([]float32, len(x))
				for i := range x {
					half[i] = float32(r.NormFloat64())
				}
				bits, err := core.HalfBits(core.Float16, half)
				if err != nil {
					t.Fatal(err)
				}
				raw = make([]byte, 0, 2*len(bits)+2)
				for _, b := range bits {
					raw = binary.LittleEndian.AppendUint16(raw, b)
				}
				rowsWant = make([][]float32, rows)
				for h := range heads {
					for tt := range n {
						off := d + (tt*heads+h)*d
						rowsWant[h*n+tt] = make([]float32, d)
						for i := range d {
							rowsWant[h*n+tt][i] = core.Widen(core.Float16, bits[off+i])
						}
					}
				}
			}
			// Y: dstRows rows of q4_0, every byte 0xa5 before.
			scales := dstRows * d / 4
			yBytes := dstRows*d/2 + 2*dstRows*d/32
			before := make([]byte, yBytes)
			for i := range before {
				before[i] = 0xa5
			}
			y := buffer(t, dev, before)
			st, err := ks.Q8Store(Q8StoreArgs{
				X: buffer(t, dev, raw), XType: xt, XOffset: d, XStrides: [3]int{n * heads * d, d, heads * d},
				B: 1, Heads: heads, N: n, D: d, Y: y, YType: core.Q4_0, Scales: scales, RowDst: buffer(t, dev, rowDst),
			})
			if err != nil {
				t.Fatal(err)
			}
			run(t, ks, st)
			got := make([]byte, yBytes)
			if err := y.Read(0, got); err != nil {
				t.Fatal(err)
			}
			expect := append([]byte(nil), before...)
			for r, row := range rowsWant {
				q, s, err := core.QuantizeQ4_0(row)
				if err != nil {
					t.Fatal(err)
				}
				copy(expect[dst[r]*d/2:], q)
				for b, h := range s {
					binary.LittleEndian.PutUint16(expect[2*scales+2*(dst[r]*d/32+b):], h)
				}
			}
			for i := range expect {
				if got[i] != expect[i] {
					what := "quant byte"
					if i >= 2*scales {
						what = "scale byte"
					}
					t.Errorf("%s %d: %#02x, want %#02x", what, i, got[i], expect[i])
				}
			}
		})
	}
}

// TestQ4Attention runs attention over q4_0 K and V on the device's own
// plans (prefill with GQA, split-K decode, the storage path, and the
// prefill chunked by batch items) and on NVIDIA's tuning (the tiled
// kernel, as VKATTN_PLAN_AS=nvidia plans), and checks O and the log-sum-exp against
// the float64 reference on the dequantized values, at §17's sweep
// tolerance.
func TestQ4Attention(t *testing.T) {
	dev, ks := openKernels(t)
	info := dev.Info.DeviceInfo
	r := rand.New(rand.NewSource(4))
	small := info
	// A batch item's Q (1024 vec4 texels) and O (8 KiB) fit, two do not;
	// the prefill's kernel serves (the same specialization).
	small.Limits.MaxTexelBufferElements, small.Limits.MaxStorageBufferRange = 1024, 8<<10
	for _, c := range []struct {
		name              string
		b, h, hkv, l, s   int
		dk, dv            int
		dev               core.DeviceInfo
		force             core.LoadPath
		vType             core.DType
		causal            core.Causal
		wantChunks, split bool
		vendor            string // plan with this vendor's tuning
	}{
		{"prefill", 2, 4, 2, 16, 40, 64, 32, info, core.AutoLoadPath, core.Q4_0, core.CausalBottomRight, false, false, ""},
		{"decode", 1, 8, 2, 1, 300, 64, 64, info, core.AutoLoadPath, core.Q4_0, core.NotCausal, false, true, ""},
		{"storage, V q8_0", 2, 4, 2, 16, 40, 64, 32, info, core.StorageLoadPath, core.Q8_0, core.NotCausal, false, false, ""},
		{"prefill in chunks", 2, 4, 2, 16, 40, 64, 32, small, core.AutoLoadPath, core.Q4_0, core.CausalBottomRight, true, false, ""},
		{"tiled", 2, 4, 2, 16, 40, 64, 32, info, core.AutoLoadPath, core.Q4_0, core.CausalBottomRight, false, false, "nvidia"},
	} {
		t.Run(c.name, func(t *testing.T) {
			qs, ks4, vs := [4]int{c.b, c.h, c.l, c.dk}, [4]int{c.b, c.hkv, c.s, c.dk}, [4]int{c.b, c.hkv, c.s, c.dv}
			normal := func(n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return x
			}
			q, k, v := normal(c.b*c.h*c.l*c.dk), normal(c.b*c.hkv*c.s*c.dk), normal(c.b*c.hkv*c.s*c.dv)
			kRaw, kScales := q4Tensor(t, k)
			k4, err := core.Round(core.Q4_0, k)
			if err != nil {
				t.Fatal(err)
			}
			v4, err := core.Round(c.vType, v)
			if err != nil {
				t.Fatal(err)
			}
			var vRaw []byte
			vScales := len(v) / 4
			if c.vType == core.Q4_0 {
				vRaw, vScales = q4Tensor(t, v)
			} else {
				qv, s, err := core.QuantizeQ8_0(v)
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range qv {
					vRaw = append(vRaw, byte(x))
				}
				for _, h := range s {
					vRaw = binary.LittleEndian.AppendUint16(vRaw, h)
				}
				vScales = len(v) / 2
			}
			opts := core.Options{Causal: c.causal}
			ref, err := reference.Attention(q, qs, k4, ks4, v4, vs, opts)
			if err != nil {
				t.Fatal(err)
			}
			in := pipelines.PlanInput{AttentionShape: pipelines.DenseShape(c.b, c.h, c.hkv, c.l, c.s, c.dk, c.dv), Force: c.force}
			in.K.Type, in.V.Type, in.K.Scales, in.V.Scales = core.Q4_0, c.vType, kScales, vScales
			in.LSE = true
			in.Scalars = pipelines.Scalars{Scale: 1 / math.Sqrt(float64(c.dk)), Causal: c.causal}
			if c.vendor != "" {
				tuning, err := pipelines.VendorTuning(c.vendor)
				if err != nil {
					t.Fatal(err)
				}
				in.Tuning = &tuning
			}
			p, err := pipelines.PlanAttention(c.dev, in)
			if err != nil {
				t.Fatal(err)
			}
			if (p.Variant.Family == pipelines.FamilyTiled) != (c.vendor != "") {
				t.Fatalf("plan %s with %q's tuning", p.Variant, c.vendor)
			}
			if !p.Variant.Quant || (p.Chunks > 1) != c.wantChunks || (p.Splits > 0) != c.split || (c.force != core.AutoLoadPath && p.Path != c.force) {
				t.Fatalf("plan %s, %d chunks, %d splits; want a quantized build, chunks %v, split-K %v", p.Variant, p.Chunks, p.Splits, c.wantChunks, c.split)
			}
			o, err := dev.NewBuffer(uint64(4 * c.b * c.h * c.l * c.dv))
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			lse, err := dev.NewBuffer(uint64(4 * c.b * c.h * c.l))
			if err != nil {
				t.Fatal(err)
			}
			defer lse.Close()
			st, err := ks.Attention(p, AttentionArgs{Q: buffer(t, dev, f32Bytes(q)), K: buffer(t, dev, kRaw), V: buffer(t, dev, vRaw), O: o, LSE: lse})
			if err != nil {
				t.Fatal(err)
			}
			run(t, ks, st)
			checkOutputs(t, p.Variant.Name(), o, lse, ref)
		})
	}
}

// checkOutputs compares a run's O and LSE with the float64 reference's
// at the sweep tolerance.
func checkOutputs(t *testing.T, variant string, o, lse *vk.Buffer, ref *reference.Result) {
	t.Helper()
	gotO, gotLSE := make([]float32, len(ref.O)), make([]float32, len(ref.LSE))
	if err := o.ReadFloat32(0, gotO); err != nil {
		t.Fatal(err)
	}
	if err := lse.ReadFloat32(0, gotLSE); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Compare(gotO, ref.O, verdict.SweepTolerance, 0); err != nil {
		t.Errorf("%s O: %v", variant, err)
	}
	if err := testutil.Compare(gotLSE, ref.LSE, verdict.SweepTolerance, 0); err != nil {
		t.Errorf("%s LSE: %v", variant, err)
	}
}
