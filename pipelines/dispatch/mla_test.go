package dispatch

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/reference"
)

// q8Tensor is data, whole blocks, as a q8_0 tensor lies in its buffer:
// a byte per quant, then the float16 scales; scales is where those start,
// in halves.
func q8Tensor(t *testing.T, data []float32) (raw []byte, scales int) {
	t.Helper()
	q, s, err := core.QuantizeQ8_0(data)
	if err != nil {
		t.Fatal(err)
	}
	raw = make([]byte, 0, len(q)+2*len(s))
	for _, x := range q {
		raw = append(raw, byte(x))
	}
	for _, h := range s {
		raw = binary.LittleEndian.AppendUint16(raw, h)
	}
	return raw, len(q) / 2
}

// tensorBytes is data stored as type t (float32, float16 or q8_0) and
// where its scales start (q8_0), beside the float32 values it holds.
func tensorBytes(t *testing.T, tp core.DType, data []float32) (raw []byte, scales int, held []float32) {
	t.Helper()
	held, err := core.Round(tp, data)
	if err != nil {
		t.Fatal(err)
	}
	switch tp {
	case core.Float32:
		return f32Bytes(data), 0, held
	case core.Q8_0:
		raw, scales = q8Tensor(t, data)
		return raw, scales, held
	}
	bits, err := core.HalfBits(tp, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range bits {
		raw = binary.LittleEndian.AppendUint16(raw, h)
	}
	return raw, 0, held
}

// TestMLAAttention runs multi-head latent attention (DeepSeek V2/V3's
// absorbed decode form) on the device and checks O and the log-sum-exp
// against the float64 reference at §17's sweep tolerance: 128 query heads
// over one latent KV head, d_k 576 (512 latent and 64 rotary columns), V
// the latent's 512 leading columns read from K's buffer with K's row
// stride (as V's own strided view, and as K's tile where the plan knows V
// is K's leading columns); decode over 300 keys (split-K) from a paged
// latent cache whose pages lie out of order among unused ones, and a
// causal (bottom-right) prefill of 16 rows over 200 keys; float32, float16
// and q8_0 latents; on lavapipe's own plan and on NVIDIA's tuning (its
// tiles fitted to this device, as VKATTN_PLAN_AS=nvidia plans).
func TestMLAAttention(t *testing.T) {
	dev, ks := openKernels(t)
	info := dev.Info.DeviceInfo
	const h, dk, dv, page = 128, 576, 512, 16
	for _, c := range []struct {
		name         string
		l, s         int
		qType, kType core.DType
		vFromK       bool
		paged        bool
		causal       core.Causal
		vendor       string
	}{
		{"decode, paged, float32", 1, 300, core.Float32, core.Float32, true, true, core.NotCausal, ""},
		{"prefill, q8_0 latent", 16, 200, core.Float32, core.Q8_0, true, false, core.CausalBottomRight, ""},
		{"decode, paged, q8_0 latent, V its own view", 1, 300, core.Float32, core.Q8_0, false, true, core.NotCausal, "nvidia"},
		{"prefill, float16", 16, 200, core.Float16, core.Float16, true, false, core.CausalBottomRight, "nvidia"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(576))
			normal := func(n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return x
			}
			// The latent cache: S rows of d_k, logically (1, 1, S, d_k).
			latent := normal(c.s * dk)
			q := normal(h * c.l * dk)
			in := pipelines.PlanInput{AttentionShape: pipelines.DenseShape(1, h, 1, c.l, c.s, dk, dv)}
			in.V = in.K // V: K's first d_v columns, K's strides
			in.VFromK = c.vFromK
			// The K buffer: the latent rows in place, or in pages of the
			// pool (a page of 16 positions each, logical page i at pool
			// page table[i], the pool's other pages NaN, or 300 in q8_0).
			rows := latent
			var table []byte
			if c.paged {
				n := (c.s + page - 1) / page
				pages := 2*n + 1
				perm := r.Perm(pages)[:n]
				fill := float32(math.NaN())
				if c.kType == core.Q8_0 {
					fill = 300
				}
				rows = make([]float32, pages*page*dk)
				for i := range rows {
					rows[i] = fill
				}
				for j := range c.s {
					copy(rows[(perm[j/page]*page+j%page)*dk:], latent[j*dk:(j+1)*dk])
				}
				for _, p := range perm {
					table = binary.LittleEndian.AppendUint32(table, uint32(p))
				}
				in.Paging, in.Pages, in.PagesPerItem = page, pages, n
				in.K.Strides = [3]int{page * dk, page * dk, dk} // page, head (one), position
				in.V.Strides = in.K.Strides
			}
			kRaw, scales, kHeld := tensorBytes(t, c.kType, rows)
			qRaw, _, qHeld := tensorBytes(t, c.qType, q)
			in.Q.Type, in.K.Type, in.V.Type = c.qType, c.kType, c.kType
			in.K.Scales, in.V.Scales = scales, scales
			in.LSE = true
			in.Scalars = pipelines.Scalars{Scale: 1 / math.Sqrt(float64(dk)), Causal: c.causal}
			if c.vendor != "" {
				tuning, err := pipelines.VendorTuning(c.vendor)
				if err != nil {
					t.Fatal(err)
				}
				in.Tuning = &tuning
			}
			p, err := pipelines.PlanAttention(info, in)
			if err != nil {
				t.Fatal(err)
			}
			if p.Variant.Family != pipelines.FamilyTiled || p.Variant.SplitK != (c.l == 1) || p.Variant.Quant != (c.kType == core.Q8_0) || p.DMax != dk || p.DVMax != dv {
				t.Fatalf("plan %v; want the tiled kernels, split-K for decode, d_max %d and %d", p, dk, dv)
			}
			// The reference reads the values the device holds: the
			// logical latent rows as stored, V their first d_v columns.
			k := kHeld
			if c.paged {
				k = make([]float32, c.s*dk)
				for j := range c.s {
					perm := binary.LittleEndian.Uint32(table[4*(j/page):])
					copy(k[j*dk:(j+1)*dk], kHeld[(int(perm)*page+j%page)*dk:])
				}
			}
			v := make([]float32, c.s*dv)
			for j := range c.s {
				copy(v[j*dv:(j+1)*dv], k[j*dk:])
			}
			ref, err := reference.Attention(qHeld, [4]int{1, h, c.l, dk}, k, [4]int{1, 1, c.s, dk}, v, [4]int{1, 1, c.s, dv}, core.Options{Causal: c.causal})
			if err != nil {
				t.Fatal(err)
			}
			o, err := dev.NewBuffer(uint64(4 * h * c.l * dv))
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			lse, err := dev.NewBuffer(uint64(4 * h * c.l))
			if err != nil {
				t.Fatal(err)
			}
			defer lse.Close()
			kb := buffer(t, dev, kRaw)
			args := AttentionArgs{Q: buffer(t, dev, qRaw), K: kb, V: kb, O: o, LSE: lse}
			if c.paged {
				args.PageTable = buffer(t, dev, table)
			}
			st, err := ks.Attention(p, args)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			run(t, ks, st)
			t.Logf("%v: first run (compiles the kernel) %.1f s", p, time.Since(start).Seconds())
			checkOutputs(t, p.Variant.Name(), o, lse, ref)
		})
	}
}
