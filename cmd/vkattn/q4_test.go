package main

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/reference"
)

// run and decode with --kv-dtype q4_0 (--check passing) against float64
// attention on K and V quantized as ggml's q4_0, reproduced independently
// of the code under test: GQA, causal, a zero block and an outlier. Rows
// that are not whole blocks are refused naming 32, and so are Q in q4_0
// and the backward over q4_0 K and V (usage errors).
func TestQ4Commands(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewPCG(23, 23))
	dir := t.TempDir()
	qs, ks := [4]int{2, 4, 9, 32}, [4]int{2, 2, 9, 32}
	qPath, q := randomNPY(t, r, dir, "q.npy", qs)
	_, k := randomNPY(t, r, dir, "k0.npy", ks)
	for i := 64; i < 96; i++ {
		k[i] = 0 // a zero block
	}
	k[200] = 300 // an outlier
	kPath := save(t, dir, "k.npy", nest(k, ks))
	vPath, v := randomNPY(t, r, dir, "v.npy", ks)
	_, kq := devtest.GGMLQ4_0(k)
	_, vq := devtest.GGMLQ4_0(v)
	want, err := reference.Attention(q, qs, kq, ks, vq, ks, vkattn.Options{Causal: vkattn.CausalBottomRight})
	if err != nil {
		t.Fatal(err)
	}
	o := filepath.Join(dir, "o.npy")
	cliOK(t, "run", "-q", qPath, "-k", kPath, "-v", vPath, "--kv-dtype", "q4_0", "--causal", "bottom-right", "-o", o, "--check")
	within(t, "run", load(t, o).F32, want.O)
	od := filepath.Join(dir, "od.npy")
	cliOK(t, "decode", "-q", qPath, "-k", kPath, "-v", vPath, "--kv-dtype", "q4_0", "--prefill", "3", "-o", od, "--check")
	within(t, "decode", load(t, od).F32, want.O)

	odd, _ := randomNPY(t, r, dir, "odd.npy", [4]int{1, 1, 4, 48})
	checkRefused(t, []string{"decode", "-q", odd, "-k", odd, "-v", odd, "--kv-dtype", "q4_0"}, exitFail, "q4_0 stores rows in blocks of 32", "")
	checkRefused(t, []string{"run", "-q", qPath, "-k", kPath, "-v", vPath, "--dtype", "q4_0"}, exitUsage, "--kv-dtype q4_0", "")
	checkRefused(t, []string{"grad", "-q", qPath, "-k", kPath, "-v", vPath, "--dout", qPath, "--kv-dtype", "q4_0"}, exitUsage, "--kv-dtype q4_0: the backward reads float K and V", "")
}
