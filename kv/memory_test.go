package kv_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// A cache the heap cannot hold is refused before the host builds anything
// of its size: kv.New's host allocations stay far below the cache's
// bytes, in every element type, contiguous or paged.
func TestKVCacheBeyondTheHeapAllocatesNothingOnTheHost(t *testing.T) {
	d, err := vkattn.Open(vkattn.Config{Validation: true, MemoryLimit: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// 2^24 elements a tensor: 64 MiB as float32, 17 MiB as q8_0, each
	// beyond the 4 MiB heap.
	base := kv.Config{B: 1, HKV: 8, Capacity: 1 << 14, DK: 128, DV: 128}
	for _, c := range []struct {
		name string
		set  func(*kv.Config)
	}{
		{"f32", func(*kv.Config) {}},
		{"f16", func(c *kv.Config) { c.DType = vkattn.Float16 }},
		{"bf16", func(c *kv.Config) { c.DType = vkattn.BFloat16 }},
		{"q8_0", func(c *kv.Config) { c.DType = vkattn.Q8_0 }},
		{"paged", func(c *kv.Config) { c.PageSize = 256 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.set(&cfg)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cache, err := kv.New(d, cfg)
			runtime.ReadMemStats(&after)
			if cache != nil {
				cache.Close()
			}
			if !errors.Is(err, vkattn.ErrTooLarge) {
				t.Errorf("a cache of 2^24 elements a tensor under a 4 MiB heap: %v, want ErrTooLarge", err)
			}
			const limit = 1 << 20 // the float32 cache is 2^26 bytes a tensor
			if grew := after.TotalAlloc - before.TotalAlloc; grew > limit {
				t.Errorf("New allocated %d bytes on the host, want under %d", grew, limit)
			}
		})
	}
	// The device stays usable: a cache that fits is made.
	cache, err := kv.New(d, kv.Config{B: 1, HKV: 1, Capacity: 64, DK: 8, DV: 8})
	if err != nil {
		t.Fatal(err)
	}
	cache.Close()
}

// A new cache reads as zeros in every element type, whatever its memory
// held before: a freed buffer of the same size, full of ones, is reused
// for its keys.
func TestKVCacheStartsZeroed(t *testing.T) {
	d, err := vkattn.Open(vkattn.Config{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const capacity, dk = 64, 32
	ones := make([]float32, capacity*dk)
	for i := range ones {
		ones[i] = 1
	}
	for _, dt := range []vkattn.DType{vkattn.Float32, vkattn.Float16, vkattn.BFloat16, vkattn.Q8_0} {
		t.Run(dt.String(), func(t *testing.T) {
			// Freed tensors of the cache's type and shape: their
			// buffers are kept for the next of the same size.
			for i := 0; i < 2; i++ {
				x, err := d.UploadAs([]int{1, 1, capacity, dk}, ones, dt)
				if err != nil {
					t.Fatal(err)
				}
				x.Close()
			}
			cache, err := kv.New(d, kv.Config{B: 1, HKV: 1, Capacity: capacity, DK: dk, DV: dk, DType: dt})
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			keys, err := kv.CacheKeys(cache)
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range keys {
				if x != 0 || math.Signbit(float64(x)) {
					t.Fatalf("key element %d of a new cache is %g, want 0", i, x)
				}
			}
		})
	}
}

// Heads wider than the kernels take are refused by New itself,
// naming MaxHeadWidth, not by every call over the cache later.
func TestKVCacheWiderThanTheKernels(t *testing.T) {
	w := vkattn.MaxHeadWidth
	for _, cfg := range []kv.Config{
		{B: 1, HKV: 1, Capacity: 4, DK: w + 1, DV: 8},
		{B: 1, HKV: 1, Capacity: 4, DK: 8, DV: w + 1},
		{B: 1, HKV: 1, Capacity: 4, DK: w + 32, DV: 32, DType: vkattn.Q8_0},
	} {
		cache, err := kv.New(devtest.Dev, cfg)
		if cache != nil {
			cache.Close()
		}
		if !errors.Is(err, vkattn.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("MaxHeadWidth = %d", w)) {
			t.Errorf("New with DK = %d, DV = %d (%v): %v, want ErrTooLarge naming MaxHeadWidth = %d", cfg.DK, cfg.DV, cfg.DType, err, w)
		}
	}
	for _, dt := range []vkattn.DType{vkattn.Float32, vkattn.Q8_0} {
		cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 4, DK: w, DV: w, DType: dt})
		if err != nil {
			t.Errorf("New of heads MaxHeadWidth = %d wide (%v): %v", w, dt, err)
			continue
		}
		cache.Close()
	}
}

// Appending a value beyond the cache's bound (2^32) is ErrOverflow naming
// the cache and its bound, by Append and by a decode step alike, and
// appends nothing; a float16 cache names float16's range, which is
// narrower.
func TestKVCacheAppendBeyondItsBound(t *testing.T) {
	for _, dt := range []vkattn.DType{vkattn.Float32, vkattn.BFloat16, vkattn.Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 4, DK: 4, DV: 4, DType: dt})
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			big := []float32{0, 1e10, 0, 0}
			step := devtest.PrepareStep(t, cache, 1, vkattn.Options{})
			defer step.Close()
			for _, c := range []struct {
				name string
				err  error
			}{
				{"Append of keys", cache.Append(big, make([]float32, 4), 1)},
				{"Append of values", cache.Append(make([]float32, 4), big, 1)},
				{"a decode step's keys", func() error {
					_, err := step.Run(t.Context(), big, make([]float32, 4), make([]float32, 4), make([]float32, 4))
					return err
				}()},
			} {
				msg := fmt.Sprint(c.err)
				if !errors.Is(c.err, vkattn.ErrOverflow) || strings.Contains(msg, "this tensor") {
					t.Errorf("%s of |x| = 1e10: %v, want ErrOverflow naming the cache", c.name, c.err)
					continue
				}
				want := "KV cache's bound 4.294967296e+09"
				if dt == vkattn.Float16 {
					want = "does not fit f16"
				}
				if !strings.Contains(msg, want) {
					t.Errorf("%s of |x| = 1e10: %q, want it to say %q", c.name, msg, want)
				}
			}
			if got := cache.Lengths(); got[0] != 0 {
				t.Errorf("length %d after refused appends, want 0", got[0])
			}
			// At the bound itself: accepted.
			if dt != vkattn.Float16 {
				if err := cache.Append([]float32{0, 1 << 32, 0, 0}, make([]float32, 4), 1); err != nil {
					t.Errorf("Append of |x| = 2^32: %v", err)
				}
			}
		})
	}
}

// A cache's RoPE table is written a piece of positions at a time: queries
// at positions in the second and third pieces are rotated as the
// reference rotates them.
func TestKVCacheRoPEPastOnePiece(t *testing.T) {
	const H, D, capacity = 2, 8, 9000
	r := rand.New(rand.NewSource(341))
	rope := &vkattn.RoPE{Theta: 10000, Style: vkattn.RoPEInterleaved}
	cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: capacity, DK: D, DV: D, RoPE: rope})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	hist := newHistory(1, 1, D, D, vkattn.Float32)
	for _, n := range []int{4100, 4100} {
		k, v := devtest.RandomValues(r, n*D), devtest.RandomValues(r, n*D)
		if err := cache.Append(k, v, n); err != nil {
			t.Fatal(err)
		}
		hist.add(0, k, v, n)
		qData := devtest.RandomValues(r, H*2*D)
		out, err := cache.Attention(devtest.Upload(t, devtest.Dev, []int{1, H, 2, D}, qData), vkattn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		o := devtest.Download(t, out.O)
		out.Close()
		hist.check(t, fmt.Sprintf("queries at %d", cache.Lengths()[0]-2), o, qData, H, 2, vkattn.Options{RoPE: rope})
	}
}
