package kv_test

import (
	"bytes"
	"errors"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// Appends into an iq4_nl cache store ggml's bytes: a float32 tensor
// quantized on the device (q8_store.comp), and host data quantized in Go,
// both byte for byte as the independent C reproduction of ggml's
// quantize_row_iq4_nl_ref wrote them for testdata/iq4_nl (ties between
// levels at both signs of max, zero, tiny and large blocks, the first of
// equal magnitudes, random normals).
func TestIQ4NLQuantizeOnDevice(t *testing.T) {
	x, want, _, err := devtest.GGMLIQ4NL()
	if err != nil {
		t.Fatal(err)
	}
	const B, HKV, D = 1, 2, 64
	n := len(x) / (B * HKV * D)
	for _, c := range []struct {
		name  string
		store func(cache *kv.Cache) error
	}{
		{"device", func(cache *kv.Cache) error {
			kt := devtest.MustUploadAs(t, devtest.Dev, []int{B, HKV, n, D}, x, vkattn.Float32)
			defer kt.Close()
			return cache.AppendTensors(kt, kt)
		}},
		{"host", func(cache *kv.Cache) error { return cache.Append(x, x, n) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache, err := kv.New(devtest.Dev, kv.Config{B: B, HKV: HKV, Capacity: n, DK: D, DV: D, DType: vkattn.IQ4_NL})
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
				quants := len(x) / 2
				for i := range want {
					if got[i] != want[i] {
						what := "indices"
						if i >= quants {
							what = "scales"
						}
						t.Fatalf("byte %d of the keys (%s: the first %d bytes are indices): %#02x stored, %#02x by ggml", i, what, quants, got[i], want[i])
					}
				}
			}
		})
	}
}

// An iq4_nl KV cache, on lavapipe's plan and planned as NVIDIA: ragged
// prefills from the host, appends of float32 tensors (quantized on the
// device) and of iq4_nl tensors (copied), a three-query call and decode
// steps, against the reference on the dequantized values. Heads that are
// not whole blocks are refused naming 32.
func TestKVCacheIQ4NL(t *testing.T) {
	for _, plan := range devtest.OwnAndNVIDIA {
		t.Run(plan, func(t *testing.T) {
			const B, H, HKV, D = 2, 4, 2, 32
			r := rand.New(rand.NewSource(105))
			d := devtest.EveryPlan()[plan]
			cache, err := kv.New(d, kv.Config{B: B, HKV: HKV, Capacity: 64, DK: D, DV: D, DType: vkattn.IQ4_NL})
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Close()
			hist := newHistory(B, HKV, D, D, vkattn.Float32)
			stored := func(x []float32) []float32 { return devtest.RoundAll(vkattn.IQ4_NL, x) }
			for b, n := range []int{20, 9} {
				k, v := devtest.RandomValues(r, HKV*n*D), devtest.RandomValues(r, HKV*n*D)
				if err := cache.AppendTo(b, k, v, n); err != nil {
					t.Fatal(err)
				}
				hist.add(b, stored(k), stored(v), n)
			}
			appendAttendStep(t, d, r, cache, hist, H, []vkattn.DType{vkattn.Float32, vkattn.IQ4_NL}, stored, true)
		})
	}
	_, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 8, DK: 48, DV: 32, DType: vkattn.IQ4_NL})
	if !errors.Is(err, vkattn.ErrShape) || !strings.Contains(err.Error(), "32") || !strings.Contains(err.Error(), "iq4_nl") {
		t.Errorf("an iq4_nl cache of d_k 48: %v, want ErrShape naming iq4_nl and 32", err)
	}
}
