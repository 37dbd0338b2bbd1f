package main

import (
	"math/rand/v2"
	"testing"

	"github.com/vkattn/vkattn/internal/devtest"
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
	qPath, kPath, vPath := quantizedCommands(t, r, dir, "q4_0", func(x []float32) []float32 {
		_, values := devtest.GGMLQ4_0(x)
		return values
	})

	odd, _ := randomNPY(t, r, dir, "odd.npy", [4]int{1, 1, 4, 48})
	checkRefused(t, []string{"decode", "-q", odd, "-k", odd, "-v", odd, "--kv-dtype", "q4_0"}, exitFail, "q4_0 stores rows in blocks of 32", "")
	checkRefused(t, []string{"run", "-q", qPath, "-k", kPath, "-v", vPath, "--dtype", "q4_0"}, exitUsage, "--kv-dtype q4_0", "")
	checkRefused(t, []string{"grad", "-q", qPath, "-k", kPath, "-v", vPath, "--dout", qPath, "--kv-dtype", "q4_0"}, exitUsage, "--kv-dtype q4_0: the backward reads float K and V", "")
}
