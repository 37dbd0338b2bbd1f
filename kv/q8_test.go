package kv_test

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// A q8_0 KV cache: ragged prefills from the host (quantized there),
// appends of q8_0 device tensors (copied on the device, quants and
// scales) and of float32 ones, and decode steps (the split-K kernels, a
// view of 256 positions), every step against the reference on the values
// as stored: contiguous on lavapipe's plan, paged on AMD's (NVIDIA's
// paged q8_0 steps are TestForkSharesPages's, and every plan's one-shot
// q8_0 calls TestQ8KVEveryPlan's); rows that are not whole blocks are
// refused naming 32.
func TestKVCacheQ8(t *testing.T) {
	for _, name := range []string{"auto", "amd"} {
		d := devtest.EveryPlan()[name]
		t.Run(name, func(t *testing.T) {
			const B, H, HKV, D = 2, 4, 2, 32
			r := rand.New(rand.NewSource(98))
			page := 0
			if name == "amd" {
				page = 16
			}
			cfg := kv.Config{B: B, HKV: HKV, Capacity: 300, DK: D, DV: D, DType: vkattn.Q8_0, PageSize: page}
			cache, hist := filledCache(t, d, r, cfg, 40, 17)
			appendAttendStep(t, d, r, cache, hist, H, []vkattn.DType{vkattn.Q8_0, vkattn.Float32}, nil, true)
		})
	}
	_, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 8, DK: 48, DV: 32, DType: vkattn.Q8_0})
	if !errors.Is(err, vkattn.ErrShape) || !strings.Contains(err.Error(), "32") {
		t.Errorf("a q8_0 cache of d_k 48: %v, want ErrShape naming 32", err)
	}
}

// appendAttendStep appends two positions to every sequence of cache as
// device tensors of each of types in turn (an outlier next to a zero in
// K), makes a call of three queries per sequence and, with steps, two
// decode steps, each checked against hist, which records what the cache
// holds: stored(x) of host values x (nil: x; hist's own rounding applies
// after it).
func appendAttendStep(t *testing.T, d *vkattn.Device, r *rand.Rand, cache *kv.Cache, hist *history, H int, types []vkattn.DType, stored func([]float32) []float32, steps bool) {
	t.Helper()
	cfg := cache.Config()
	B, HKV, D := cfg.B, cfg.HKV, cfg.DK
	if stored == nil {
		stored = func(x []float32) []float32 { return x }
	}
	k, v := devtest.RandomValues(r, B*HKV*2*D), devtest.RandomValues(r, B*HKV*2*D)
	k[3], k[35] = 0, 25 // an outlier next to a zero
	for _, dt := range types {
		kt, vt := devtest.MustUploadAs(t, d, []int{B, HKV, 2, D}, k, dt), devtest.MustUploadAs(t, d, []int{B, HKV, 2, D}, v, dt)
		if err := cache.AppendTensors(kt, vt); err != nil {
			t.Fatal(err)
		}
		kt.Close()
		vt.Close()
		for b := 0; b < B; b++ {
			hist.add(b, stored(k[b*HKV*2*D:(b+1)*HKV*2*D]), stored(v[b*HKV*2*D:(b+1)*HKV*2*D]), 2)
		}
	}
	q := devtest.RandomValues(r, B*H*3*D)
	o, _ := attendOnce(t, cache, devtest.Upload(t, d, []int{B, H, 3, D}, q), vkattn.Options{})
	hist.check(t, "three queries", o, q, H, 3, vkattn.Options{})
	if !steps {
		return
	}
	step := devtest.PrepareStep(t, cache, H, vkattn.Options{})
	defer step.Close()
	o = make([]float32, B*H*D)
	for i := 0; i < 2; i++ {
		k, v, q := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
		if _, err := step.Run(t.Context(), k, v, q, o); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			hist.add(b, stored(k[b*HKV*D:(b+1)*HKV*D]), stored(v[b*HKV*D:(b+1)*HKV*D]), 1)
		}
		hist.check(t, fmt.Sprintf("step %d", i), o, q, H, 1, vkattn.Options{})
	}
}

// AppendTensors of float tensors into a q8_0 cache quantizes on the
// device exactly as the host does (ggml's rounding at every step): ties
// of x*id at .5, zero blocks, outliers, float16-subnormal scales, and
// many random blocks whose d = amax/127 and 1/d GLSL's division alone
// would not round correctly; from float32, float16 and bfloat16 tensors
// and a strided view.
func TestQ8QuantizeOnDevice(t *testing.T) {
	const B, HKV, n, D = 2, 2, 256, 64
	r := rand.New(rand.NewSource(99))
	k := make([]float32, B*HKV*n*D)
	for i := range k {
		k[i] = float32(r.NormFloat64() * float64(int(1)<<(i/32%13)) / 64)
	}
	row := k[:D]
	for i := range row[:32] {
		row[i] = float32(i%7) - 3.5 // amax 3.5: id = 127/3.5
	}
	row[0] = 127 // d = 1: x*id = x, ties at .5
	row[1], row[2], row[3] = 2.5, -2.5, 0.5
	for i := 32; i < 64; i++ {
		row[i] = 0 // a zero block
	}
	k[D+5] = 1e4                        // an outlier
	k[2*D] = 127 * 0x1p-20              // a float16-subnormal scale
	k[2*D+1], k[2*D+2] = 0x1p-21, -3e-7 // and its small values
	want, err := vkattn.Round(vkattn.Q8_0, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		dt      vkattn.DType
		strided bool
	}{{"f32", vkattn.Float32, false}, {"f16", vkattn.Float16, false}, {"bf16", vkattn.BFloat16, false}, {"f32 view", vkattn.Float32, true}} {
		t.Run(c.name, func(t *testing.T) {
			src := devtest.RoundAll(c.dt, k)
			want := want
			if c.dt != vkattn.Float32 {
				if want, err = vkattn.Round(vkattn.Q8_0, src); err != nil {
					t.Fatal(err)
				}
			}
			cache, err := kv.New(devtest.Dev, kv.Config{B: B, HKV: HKV, Capacity: n, DK: D, DV: D, DType: vkattn.Q8_0})
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			var kt *vkattn.Tensor
			if c.strided {
				kt = devtest.MustUploadAs(t, devtest.Dev, []int{B, n, HKV, D}, devtest.ToBLHD(src, [4]int{B, HKV, n, D}), c.dt).SwapAxes12()
			} else {
				kt = devtest.MustUploadAs(t, devtest.Dev, []int{B, HKV, n, D}, src, c.dt)
			}
			defer kt.Close()
			if err := cache.AppendTensors(kt, kt); err != nil {
				t.Fatal(err)
			}
			got, err := kv.CacheKeys(cache)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("key element %d (of %v): %v on the device, %v on the host", i, src[i], got[i], want[i])
				}
			}
		})
	}
}
