package main

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/x448/float16"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/reference"
)

// ggmlQ8 is ggml's quantize_row_q8_0_ref followed by dequantization,
// written out here on its own: per block of 32, d = amax/127 in float32,
// id = 1/d, q = roundf(x*id), d kept as float16; x' = q * d.
func ggmlQ8(x []float32) []float32 {
	out := make([]float32, len(x))
	for b := 0; b < len(x); b += 32 {
		var amax float32
		for _, v := range x[b : b+32] {
			amax = float32(math.Max(float64(amax), math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		d16 := float16.Fromfloat32(d).Float32()
		for i, v := range x[b : b+32] {
			out[b+i] = float32(math.Round(float64(float32(v*id)))) * d16
		}
	}
	return out
}

// run and decode with --kv-dtype q8_0 against float64 attention on K and
// V quantized as ggml does: GQA, causal, a zero block and an outlier;
// rows that are not whole blocks are refused naming 32.
func TestQ8Commands(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewPCG(19, 19))
	dir := t.TempDir()
	qPath, kPath, vPath := quantizedCommands(t, r, dir, "q8_0", ggmlQ8)
	// With RoPE the cache quantizes the rotated keys; --check compares
	// with keys so rotated and quantized.
	cliOK(t, "decode", "-q", qPath, "-k", kPath, "-v", vPath, "--kv-dtype", "q8_0", "--rope", "10000", "--rope-dims", "32", "--check")

	odd, _ := randomNPY(t, r, dir, "odd.npy", [4]int{1, 1, 4, 48})
	checkRefused(t, []string{"run", "-q", odd, "-k", odd, "-v", odd, "--kv-dtype", "q8_0"}, 1, "blocks of 32", "")
	checkRefused(t, []string{"decode", "-q", odd, "-k", odd, "-v", odd, "--kv-dtype", "q8_0"}, 1, "blocks of 32", "")
	checkRefused(t, []string{"run", "-q", qPath, "-k", kPath, "-v", vPath, "--dtype", "q8_0"}, 2, "--kv-dtype q8_0", "")
}

// quantizedCommands writes Q (2,4,9,32) and K, V (2,2,9,32) with a zero
// block and an outlier in K, and checks run --causal bottom-right and
// decode (both --check) with --kv-dtype kvType against float64 attention
// on K and V rounded by quantize, the test's own reproduction of ggml's
// format. It returns the files for the caller's further cases.
func quantizedCommands(t *testing.T, r *rand.Rand, dir, kvType string, quantize func([]float32) []float32) (qPath, kPath, vPath string) {
	t.Helper()
	qs, ks := [4]int{2, 4, 9, 32}, [4]int{2, 2, 9, 32}
	qPath, q := randomNPY(t, r, dir, "q.npy", qs)
	_, k := randomNPY(t, r, dir, "k0.npy", ks)
	for i := 64; i < 96; i++ {
		k[i] = 0 // a zero block
	}
	k[200] = 300 // an outlier
	kPath = save(t, dir, "k.npy", nest(k, ks))
	vPath, v := randomNPY(t, r, dir, "v.npy", ks)
	want, err := reference.Attention(q, qs, quantize(k), ks, quantize(v), ks, vkattn.Options{Causal: vkattn.CausalBottomRight})
	if err != nil {
		t.Fatal(err)
	}
	o := filepath.Join(dir, "o.npy")
	cliOK(t, "run", "-q", qPath, "-k", kPath, "-v", vPath, "--kv-dtype", kvType, "--causal", "bottom-right", "-o", o, "--check")
	within(t, "run", load(t, o).F32, want.O)
	od := filepath.Join(dir, "od.npy")
	cliOK(t, "decode", "-q", qPath, "-k", kPath, "-v", vPath, "--kv-dtype", kvType, "--prefill", "3", "-o", od, "--check")
	within(t, "decode", load(t, od).F32, want.O)
	return qPath, kPath, vPath
}

// nest is flat data of shape s as nested slices, for save.
func nest(flat []float32, s [4]int) [][][][]float32 {
	out := make([][][][]float32, s[0])
	for b := range out {
		out[b] = make([][][]float32, s[1])
		for h := range out[b] {
			out[b][h] = make([][]float32, s[2])
			for i := range out[b][h] {
				n := ((b*s[1]+h)*s[2] + i) * s[3]
				out[b][h][i] = flat[n : n+s[3]]
			}
		}
	}
	return out
}
