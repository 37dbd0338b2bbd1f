package vkattn_test

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// Calls larger than one binding reaches run as chunks through buffer
// windows. A device whose binding reach is lowered to 128 KiB exercises the
// split on small data: the results must still match the reference, with
// masks, lengths, causal alignment, log-sum-exp, weights and split-K.
// (Texel views are capped at 128 KiB too: BindingLimit/16 RGBA32UI texels.)
func TestCallsLargerThanABinding(t *testing.T) {
	const limit = 128 << 10
	// The plans run in parallel: each compiles its variants on its own
	// device. The tiled GPU kernels chunk like the row kernels.
	for _, c := range []struct {
		name string
		cfg  vkattn.Config
	}{{"auto", vkattn.Config{}}, {"storage", vkattn.Config{LoadPath: vkattn.StorageLoadPath}}, {"nvidia", vkattn.Config{PlanAs: "nvidia"}}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := c.cfg
			cfg.Validation, cfg.BindingLimit = true, limit
			callsLargerThanABinding(t, c.name, cfg)
		})
	}
}

// callsLargerThanABinding runs TestCallsLargerThanABinding's cases on a
// device opened with cfg (whose bindings reach cfg.BindingLimit bytes),
// the plan named path.
func callsLargerThanABinding(t *testing.T, path string, cfg vkattn.Config) {
	{
		d, err := vkattn.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		for _, c := range []struct {
			name                  string
			b, h, hkv, l, s, dk   int
			chunks, kvHeadsChunks int
			types                 [3]vkattn.DType
		}{
			// K is 205 KB, one batch item 102 KB: a chunk per batch item.
			{"per batch item", 2, 4, 2, 8, 400, 32, 2, 2, [3]vkattn.DType{}},
			// One batch item's K is 230 KB, one KV head 115 KB.
			{"per KV head", 2, 4, 2, 8, 900, 32, 4, 1, [3]vkattn.DType{}},
			// Odd query rows: the LSE and weights windows of later chunks
			// start off the binding's offset alignment.
			{"per KV head, odd rows", 2, 4, 2, 3, 900, 32, 4, 1, [3]vkattn.DType{}},
			// Decode: split-K inside every chunk.
			{"split-K", 2, 8, 2, 1, 900, 32, 4, 1, [3]vkattn.DType{}},
			// Three query heads per KV head: the combine pass's LSE windows
			// start off the alignment too.
			{"split-K, odd heads", 2, 6, 2, 1, 900, 32, 4, 1, [3]vkattn.DType{}},
			// One query head's weights are 240 KB (and its (L, S) mask as
			// large): blocks of query rows of one head. chunks 0: as many
			// as the path's reach needs (texel views reach less).
			{"query rows of one head", 2, 2, 1, 300, 200, 16, 0, 1, [3]vkattn.DType{}},
			// Half K and V, windows counted in 2-byte elements: one batch
			// item's K is 57.6 KB, under the texel views' reach of halves
			// (64 KiB), three of them over the storage reach (128 KiB).
			{"per batch item, f16 K/V", 3, 4, 1, 8, 900, 32, 3, 1, typeMixes[1]},
			{"split-K, bf16", 3, 8, 1, 1, 900, 32, 3, 1, typeMixes[3]},
		} {
			t.Run(fmt.Sprintf("%s/%s", path, c.name), func(t *testing.T) {
				r := rand.New(rand.NewSource(int64(c.s + c.l)))
				p := devtest.NewProblem(r, c.b, c.h, c.hkv, c.l, c.s, c.dk, c.dk)
				mask := devtest.RandomValues(r, c.b*c.l*c.s)
				p.Opts = vkattn.Options{
					Mask:         &vkattn.Mask{Shape: vkattn.MaskShape{c.b, 1, c.l, c.s}, Values: mask},
					KeyLengths:   []int{c.s - 7, c.s, c.s - 1}[:c.b],
					QueryLengths: []int{c.l, c.l - c.l/2, c.l}[:c.b],
					Causal:       vkattn.CausalBottomRight,
				}
				p.WantLSE = true
				p.Weights = c.l > 1 // weights rule out split-K
				p.Types = c.types
				got := devtest.RunGPU(t, d, p)
				kp := got.Out.Plan.Kernel
				if c.chunks == 0 {
					// Blocks of rows of one query head each.
					if kp.ChunkRows >= c.l || kp.Chunks != c.b*c.h*((c.l+kp.ChunkRows-1)/kp.ChunkRows) {
						t.Fatalf("plan %v: want blocks of fewer than %d rows of one query head", kp, c.l)
					}
					c.chunks = kp.Chunks
				}
				if kp.Chunks != c.chunks || kp.ChunkKVHeads != c.kvHeadsChunks || (c.l == 1) != (kp.Splits > 0) {
					t.Fatalf("plan %v: want %d chunks of %d KV heads", kp, c.chunks, c.kvHeadsChunks)
				}
				want := devtest.RunReference(t, p)
				devtest.Compare(t, "O", got.O, want.O)
				devtest.Compare(t, "LSE", got.LSE, want.LSE)
				if p.Weights {
					devtest.Compare(t, "weights", got.W, want.Weights)
				}
				// The shape-only plan predicts the same split.
				opts := p.Opts
				opts.WantLSE, opts.WantWeights = p.WantLSE, p.Weights
				plan, err := d.PlanAs(p.QS[:], p.KS[:], p.VS[:], p.Types, opts)
				if err != nil {
					t.Fatal(err)
				}
				if plan.Kernel.Chunks != c.chunks {
					t.Fatalf("Plan says %d chunks, Prepare made %d", plan.Kernel.Chunks, c.chunks)
				}
			})
		}
		// Multi-head attention layers larger than a binding: heads are read
		// through strides, so the attention splits per batch item (and per
		// head for the per-head mask); the dense layers split by rows (a
		// 198 KB fused projection output) or by outputs (a 196 KB
		// in_proj_weight).
		for _, mc := range []struct {
			d, h, T, chunks int
			byRows          bool
		}{{64, 4, 129, 2, true}, {128, 2, 40, 1, false}} {
			t.Run(fmt.Sprintf("%s/MHA d=%d T=%d", path, mc.d, mc.T), func(t *testing.T) {
				r := rand.New(rand.NewSource(31))
				c := devtest.RandomMHACase(r, mc.d, mc.h, mc.T, "key padding", false)
				c.Opts.Attention.Causal = vkattn.CausalTopLeft
				got := devtest.CheckMHA(t, d, c)
				if n := got.Plan.Attention.Kernel.Chunks; n != mc.chunks {
					t.Fatalf("MHA attention plan %v: want %d chunks", got.Plan.Attention.Kernel, mc.chunks)
				}
				in := got.Plan.Projections[0]
				if k := in.Kernel; k.Blocks < 2 || (k.BlockRows < in.Rows) != mc.byRows || (k.BlockOutputs < in.Outputs) == mc.byRows {
					t.Fatalf("in_proj %v: want blocks of fewer rows %v, of fewer outputs %v", in, mc.byRows, !mc.byRows)
				}
			})
		}
	}
}

// The backward of a call larger than one binding runs as chunks of KV
// heads with their query heads (every row of them: a key's gradient sums
// all rows), after lavapipe's forward (texel loads) and the tiled GPU
// forward: odd query heads per KV head and odd rows start the row
// buffers' windows off the binding's alignment; on NVIDIA's plan sinks
// and ALiBi read per-head data from the chunk's first head (lavapipe's
// forward with them would be another slow compile; the backward kernels
// are the same). A call whose KV head does not fit even alone is
// ErrTooLarge.
func TestBackwardLargerThanABinding(t *testing.T) {
	devtest.InParallel(t, devtest.OwnAndNVIDIA, func(t *testing.T, plan string) {
		d := devtest.SmallBindings(t, vkattn.Config{PlanAs: map[string]string{"nvidia": "nvidia"}[plan]})
		for _, c := range []struct{ h, l int }{{4, 8}, {6, 3}} {
			t.Run(fmt.Sprintf("H=%d L=%d", c.h, c.l), func(t *testing.T) {
				// One batch item's K is 230 KB, one KV head's 115 KB.
				r := rand.New(rand.NewSource(int64(c.h)))
				p := devtest.NewProblem(r, 2, c.h, 2, c.l, 900, 32, 32)
				p.Opts = vkattn.Options{
					Mask:       &vkattn.Mask{Shape: vkattn.MaskShape{2, 1, c.l, 900}, Values: devtest.RandomValues(r, 2*c.l*900)},
					KeyLengths: []int{893, 900}, QueryLengths: []int{c.l, c.l - c.l/2}, Causal: vkattn.CausalBottomRight,
				}
				if plan == "nvidia" {
					p.Opts.Sinks, p.Opts.ALiBi = devtest.RandomValues(r, c.h), vkattn.ALiBiSlopes(c.h)
				}
				if kp := checkBackward(t, d, r, p).Kernel; kp.Chunks != 4 || kp.ChunkKVHeads != 1 {
					t.Fatalf("forward plan %v: want 4 chunks of one KV head", kp)
				}
			})
		}
		t.Run("one KV head too large", func(t *testing.T) {
			r := rand.New(rand.NewSource(3))
			p := devtest.NewProblem(r, 1, 1, 1, 300, 200, 16, 16)
			// One head's (L, S) mask is 240 KB: the forward splits its
			// rows, which the backward does not.
			p.Opts = vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 300, 200}, Values: devtest.RandomValues(r, 300*200)}}
			q, k, v := p.Inputs(t, d)
			dO := devtest.Zeros(t, d, 1, 1, 300, 16)
			if _, err := d.AttentionBackward(q, k, v, dO, p.Opts); !errors.Is(err, vkattn.ErrTooLarge) {
				t.Errorf("got %v, want ErrTooLarge", err)
			}
		})
	})
}
