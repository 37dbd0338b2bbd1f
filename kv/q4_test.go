package kv_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// A q4_0 KV cache, contiguous and paged: ragged prefills from the host
// (quantized there), appends of float32 tensors (quantized on the device)
// and of q4_0 tensors (quants and scales copied on the device), a
// three-query call, and in the contiguous cache decode steps (quantized
// on the host; a paged step would only compile another kernel variant),
// every result against the reference on ggml's q4_0 values, reproduced
// independently of the code under test. Heads that are not whole blocks
// are refused naming 32.
func TestKVCacheQ4(t *testing.T) {
	for _, page := range []int{0, 16} {
		t.Run(fmt.Sprintf("page %d", page), func(t *testing.T) {
			const B, H, HKV, D = 2, 4, 2, 32
			r := rand.New(rand.NewSource(101))
			d := devtest.Dev
			cache, err := kv.New(d, kv.Config{B: B, HKV: HKV, Capacity: 64, DK: D, DV: D, DType: vkattn.Q4_0, PageSize: page})
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			// The history holds the values as stored: ggml's, kept as
			// float32 (its own rounding then changes nothing).
			hist := newHistory(B, HKV, D, D, vkattn.Float32)
			ggml := func(x []float32) []float32 {
				_, v := devtest.GGMLQ4_0(x)
				return v
			}
			for b, n := range []int{20, 9} {
				k, v := devtest.RandomValues(r, HKV*n*D), devtest.RandomValues(r, HKV*n*D)
				if err := cache.AppendTo(b, k, v, n); err != nil {
					t.Fatal(err)
				}
				hist.add(b, ggml(k), ggml(v), n)
			}
			appendAttendStep(t, d, r, cache, hist, H, []vkattn.DType{vkattn.Float32, vkattn.Q4_0}, ggml, page == 0)
		})
	}
	for _, w := range [][2]int{{48, 32}, {32, 16}} {
		_, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 8, DK: w[0], DV: w[1], DType: vkattn.Q4_0})
		if !errors.Is(err, vkattn.ErrShape) || !strings.Contains(err.Error(), "32") || !strings.Contains(err.Error(), "q4_0") {
			t.Errorf("a q4_0 cache of d_k %d, d_v %d: %v, want ErrShape naming q4_0 and 32", w[0], w[1], err)
		}
	}
}

// Appends into a q4_0 cache store ggml's bytes: float32 tensors, dense
// and a strided view, quantized on the device, and host data quantized in
// Go, both byte for byte as an independent reproduction of ggml's
// quantizer writes them, on blocks worked out by hand (ties, the sum
// rounding up, max's sign, zeros, -0s, float16-subnormal and largest
// scales) and random ones.
func TestQ4QuantizeOnDevice(t *testing.T) {
	const B, HKV, n, D = 2, 2, 16, 64
	r := rand.New(rand.NewSource(103))
	k := devtest.Q4Data(r, B*HKV*n*D)
	want, _ := devtest.GGMLQ4_0(k)
	for _, c := range []struct {
		name  string
		store func(cache *kv.Cache) error
	}{
		{"device", func(cache *kv.Cache) error {
			kt := devtest.MustUploadAs(t, devtest.Dev, []int{B, HKV, n, D}, k, vkattn.Float32)
			defer kt.Close()
			return cache.AppendTensors(kt, kt)
		}},
		{"device, a view", func(cache *kv.Cache) error {
			kt := devtest.MustUploadAs(t, devtest.Dev, []int{B, n, HKV, D}, devtest.ToBLHD(k, [4]int{B, HKV, n, D}), vkattn.Float32)
			defer kt.Close()
			return cache.AppendTensors(kt.SwapAxes12(), kt.SwapAxes12())
		}},
		{"host", func(cache *kv.Cache) error { return cache.Append(k, k, n) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache, err := kv.New(devtest.Dev, kv.Config{B: B, HKV: HKV, Capacity: n, DK: D, DV: D, DType: vkattn.Q4_0})
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			if err := c.store(cache); err != nil {
				t.Fatal(err)
			}
			got, err := kv.CacheKeyBytes(cache)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:len(want)], want) {
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("byte %d of the keys: %#02x stored, %#02x by ggml (quants are the first %d bytes)", i, got[i], want[i], len(k)/2)
					}
				}
			}
		})
	}
}

// TestQuantizedAppendTensorsRefusesOverflow: a block past the quantized
// type's range is refused on the device path as Append refuses it on the
// host (ErrOverflow, nothing appended), in q8_0, q4_0 and iq4_nl,
// contiguous and paged caches; the cache then takes the next token as before.
func TestQuantizedAppendTensorsRefusesOverflow(t *testing.T) {
	const D = 32
	for _, c := range []struct {
		dtype vkattn.DType
		big   float32
		page  int
	}{{vkattn.Q4_0, 1e9, 0}, {vkattn.Q4_0, 524160, 4}, {vkattn.Q8_0, 3e38, 0}, {vkattn.Q8_0, 8321040, 4}, {vkattn.IQ4_NL, 1e9, 4}, {vkattn.IQ4_NL, 3e38, 0}} {
		t.Run(fmt.Sprintf("%v/%g/page %d", c.dtype, c.big, c.page), func(t *testing.T) {
			cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 8, DK: D, DV: D, DType: c.dtype, PageSize: c.page})
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			row := make([]float32, D)
			for i := range row {
				row[i] = float32(i)
			}
			if err := cache.Append(row, row, 1); err != nil {
				t.Fatal(err)
			}
			before, err := kv.CacheKeyBytes(cache)
			if err != nil {
				t.Fatal(err)
			}
			bad := append([]float32{c.big}, row[1:]...)
			if err := cache.Append(bad, row, 1); !errors.Is(err, vkattn.ErrOverflow) {
				t.Fatalf("Append of a block holding %g: %v, want ErrOverflow", c.big, err)
			}
			bt := devtest.MustUploadAs(t, devtest.Dev, []int{1, 1, 1, D}, bad, vkattn.Float32)
			defer bt.Close()
			if err := cache.AppendTensors(bt, bt); !errors.Is(err, vkattn.ErrOverflow) {
				t.Fatalf("AppendTensors of a block holding %g: %v, want ErrOverflow as Append", c.big, err)
			}
			if got := cache.Lengths(); got[0] != 1 {
				t.Fatalf("lengths %v after the refusal, want [1]", got)
			}
			after, err := kv.CacheKeyBytes(cache)
			if err != nil {
				t.Fatal(err)
			}
			// The first token's quants (its row leads the keys) are as
			// they were.
			q, _ := c.dtype.Quant()
			quants := q.QuantBytes(D)
			if !bytes.Equal(after[:quants], before[:quants]) {
				t.Errorf("the stored token changed under the refused append")
			}
			good := devtest.MustUploadAs(t, devtest.Dev, []int{1, 1, 1, D}, row, vkattn.Float32)
			defer good.Close()
			if err := cache.AppendTensors(good, good); err != nil {
				t.Fatalf("the next append: %v", err)
			}
			if got := cache.Lengths(); got[0] != 2 {
				t.Errorf("lengths %v after the next append, want [2]", got)
			}
		})
	}
}
