package kv_test

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// leading is the first dv columns of each row of x, rows dk wide: the
// values a latent cache reads from its keys.
func leading(x []float32, dk, dv int) []float32 {
	var out []float32
	for i := 0; i < len(x); i += dk {
		out = append(out, x[i:i+dv]...)
	}
	return out
}

// deepSeekV3Scale is DeepSeek-V3's softmax scale: 1/sqrt(192) (its
// query-key head width, 128 plus 64 rotary columns) times the square of
// YaRN's mscale, 0.1 ln(40) + 1 (scaling factor 40, mscale_all_dim 1),
// as its model configuration gives them.
var deepSeekV3Scale = func() float64 {
	m := 0.1*math.Log(40) + 1
	return m * m / math.Sqrt(192)
}()

// A latent KV cache (multi-head latent attention, SEMANTICS.md §2) with
// DeepSeek-V3's shapes: 128 query heads over one latent head of 576
// columns, V their leading 512 read from the keys, paged (pages of 8
// positions, shared out between two sequences), the model's scale. One
// sequence holds an earlier context; then a causal (bottom-right) prefill
// of 12 tokens of both, and decode steps across a page boundary over a
// view of 272 positions (split-K on NVIDIA's plan), each against the
// float64 reference on the values as stored: float32 on lavapipe's own
// plan (appended from the host), q8_0 on NVIDIA's (the prefill's keys a
// float32 device tensor quantized on the device). Every plan reads V from
// K's tiles, and a step stages no values.
func TestLatentKVCache(t *testing.T) {
	devtest.InParallel(t, devtest.OwnAndNVIDIA, func(t *testing.T, plan string) {
		d := devtest.EveryPlan()[plan]
		const B, H, HKV, DK, DV, page, capacity, context, prefill, steps = 2, 128, 1, 576, 512, 8, 272, 250, 12, 5
		dt := vkattn.Float32
		if plan == "nvidia" {
			dt = vkattn.Q8_0
		}
		r := rand.New(rand.NewSource(576))
		cfg := kv.Config{B: B, HKV: HKV, Capacity: capacity, DK: DK, DV: DV, DType: dt, PageSize: page, Latent: true}
		cache, err := kv.New(d, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Close()
		hist := newHistory(B, HKV, DK, DV, dt)
		k := devtest.RandomValues(r, HKV*context*DK)
		if err := cache.AppendTo(0, k, nil, context); err != nil {
			t.Fatal(err)
		}
		hist.add(0, k, leading(k, DK, DV), context)

		k = devtest.RandomValues(r, B*HKV*prefill*DK)
		if dt == vkattn.Float32 {
			err = cache.Append(k, nil, prefill)
		} else {
			kt := devtest.Upload(t, d, []int{B, HKV, prefill, DK}, k)
			err = cache.AppendTensors(kt, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			kb := k[b*HKV*prefill*DK : (b+1)*HKV*prefill*DK]
			hist.add(b, kb, leading(kb, DK, DV), prefill)
		}
		opts := vkattn.Options{Scale: vkattn.CustomScale(deepSeekV3Scale)}
		q := devtest.RandomValues(r, B*H*prefill*DK)
		o, p := attendOnce(t, cache, devtest.Upload(t, d, []int{B, H, prefill, DK}, q), opts)
		checkLatentPlan(t, "prefill", p)
		hist.check(t, "prefill", o, q, H, prefill, opts)

		step := devtest.PrepareStep(t, cache, H, opts)
		defer step.Close()
		o = make([]float32, B*H*DV)
		for i := 0; i < steps; i++ {
			k, q := devtest.RandomValues(r, B*HKV*DK), devtest.RandomValues(r, B*H*DK)
			before := d.Stats()
			if _, err := step.Run(t.Context(), k, nil, q, o); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			staged := d.Stats().Since(before).StagingBytes
			for b := 0; b < B; b++ {
				kb := k[b*HKV*DK : (b+1)*HKV*DK]
				hist.add(b, kb, leading(kb, DK, DV), 1)
			}
			hist.check(t, fmt.Sprintf("step %d", i), o, q, H, 1, opts)
			// The token's keys in the cache's type (q8_0: a byte a quant
			// and a float16 scale per 32), Q and O in float32, and the
			// key lengths and page table as int32: no values.
			keys := 4 * B * HKV * DK
			if dt == vkattn.Q8_0 {
				keys = B * HKV * DK * (32 + 2) / 32
			}
			if want := uint64(keys + 4*B*H*(DK+DV) + 4*(B+B*capacity/page)); staged != want {
				t.Errorf("step %d: %d bytes staged, want %d", i, staged, want)
			}
		}
		sp, err := step.Plan()
		if err != nil {
			t.Fatal(err)
		}
		checkLatentPlan(t, "step", sp)
		// NVIDIA's compute units outnumber the row blocks of two
		// sequences: it splits the keys (lavapipe's two do not).
		if sp.Dims.S != capacity || (plan == "nvidia") != (sp.Kernel.Splits > 0) {
			t.Errorf("step plan %v: want a view of %d positions, split-K on NVIDIA's plan alone", sp, capacity)
		}
		if got := cache.Lengths(); got[0] != context+prefill+steps || got[1] != prefill+steps {
			t.Errorf("lengths %v, want [%d %d]", got, context+prefill+steps, prefill+steps)
		}
	})
}

// checkLatentPlan checks that a call over a latent cache reads V from K's
// tiles: d_max 576 for Q and K, 512 for the output, and shared memory for
// Bc keys of K (a float32 vec4 slot per 4 columns) and V's one unused
// slot, not a V tile of its own.
func checkLatentPlan(t *testing.T, what string, p vkattn.Plan) {
	t.Helper()
	k := p.Kernel
	if !k.VFromK || k.DMax != 576 || k.DVMax != 512 || k.TileRows == 0 {
		t.Fatalf("%s plan %v: want the tiled kernels with V from K, d_max 576 and 512", what, p)
	}
	if want := 4*k.KeyTile*576 + 16; k.SharedBytes != want {
		t.Errorf("%s plan: %d B of shared memory for tiles of %d keys, want %d (K's tile alone)", what, k.SharedBytes, k.KeyTile, want)
	}
	explained := p.Explain(vkattn.Options{})
	if !strings.Contains(p.String(), "V read from them") || !strings.Contains(explained, "K's leading 512 columns") || !strings.Contains(explained, "the output's 512") {
		t.Errorf("%s plan does not say V is read from K's tiles: %v", what, p)
	}
}

// A latent cache refuses V where it has none of its own: values given to
// Append, AppendTo, AppendTensors and a decode step, a DV wider than DK
// and a RoPE (which would rotate V's columns), each with the sentinel of
// SEMANTICS.md §9.4 and nothing appended.
func TestLatentKVCacheRefusals(t *testing.T) {
	d := devtest.Dev
	const B, H, DK, DV = 1, 4, 64, 32
	cfg := kv.Config{B: B, HKV: 1, Capacity: 16, DK: DK, DV: DV, Latent: true}
	cache, err := kv.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	k, v := make([]float32, DK), make([]float32, DV)
	kt := devtest.Upload(t, d, []int{1, 1, 1, DK}, k)
	vt := devtest.Upload(t, d, []int{1, 1, 1, DV}, v)
	step := devtest.PrepareStep(t, cache, H, vkattn.Options{})
	defer step.Close()
	devtest.CheckRefusals(t, []devtest.Refusal{
		{Name: "Append with values", Err: vkattn.ErrShape, Run: func() error { return cache.Append(k, v, 1) }},
		{Name: "AppendTo with values", Err: vkattn.ErrShape, Run: func() error { return cache.AppendTo(0, k, v, 1) }},
		{Name: "AppendTensors with values", Err: vkattn.ErrShape, Run: func() error { return cache.AppendTensors(kt, vt) }},
		{Name: "AppendTensors without keys", Err: vkattn.ErrShape, Run: func() error { return cache.AppendTensors(nil, nil) }},
		{Name: "a step with values", Err: vkattn.ErrShape, Run: func() error {
			_, err := step.Run(t.Context(), k, v, make([]float32, B*H*DK), make([]float32, B*H*DV))
			return err
		}},
		{Name: "DV > DK", Err: vkattn.ErrShape, Run: func() error {
			_, err := kv.New(d, kv.Config{B: 1, HKV: 1, Capacity: 16, DK: 32, DV: 64, Latent: true})
			return err
		}},
		{Name: "RoPE", Err: vkattn.ErrOption, Run: func() error {
			_, err := kv.New(d, kv.Config{B: 1, HKV: 1, Capacity: 16, DK: DK, DV: DV, Latent: true, RoPE: &vkattn.RoPE{Theta: 10000}})
			return err
		}},
	})
	if got := cache.Lengths(); got[0] != 0 {
		t.Errorf("length %d after refused appends, want 0", got[0])
	}
	// The values' width is named, so a caller knows what V is.
	if err := cache.Append(k, v, 1); err == nil || !strings.Contains(err.Error(), "leading 32 columns") {
		t.Errorf("Append with values: %v, want the refusal naming V's 32 leading columns", err)
	}
	if err := cache.Append(k, nil, 1); err != nil {
		t.Errorf("Append of keys alone: %v", err)
	}
}
