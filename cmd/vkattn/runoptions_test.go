// run's options beyond the plain call: element types (--dtype,
// --kv-dtype) and the score variants (SEMANTICS.md §4.1, §9.1).

package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/vkattn/vkattn/internal/testutil"
)

// saveF16 writes a little-endian float16 .npy of the given shape.
func saveF16(t *testing.T, dir, name string, shape []int, xs []float32) string {
	t.Helper()
	dims := ""
	for _, n := range shape {
		dims += fmt.Sprintf("%d, ", n)
	}
	hdr := fmt.Sprintf("{'descr': '<f2', 'fortran_order': False, 'shape': (%s), }", dims)
	hdr += strings.Repeat(" ", 63-(10+len(hdr))%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(hdr)), byte(len(hdr)>>8))
	b = append(b, hdr...)
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint16(b, float16.Fromfloat32(x).Bits())
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runSummaryOf runs vkattn run with --json and decodes what the half tests
// read of it.
func runSummaryOf(t *testing.T, args ...string) (dtypes [3]string, pass bool, o []float32) {
	t.Helper()
	dir := t.TempDir()
	oPath := filepath.Join(dir, "o.npy")
	out := cliOK(t, append(append([]string{"run"}, args...), "-o", oPath, "--check", "--json")...)
	var s struct {
		DTypes [3]string
		Check  struct{ Pass bool }
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out)
	}
	return s.DTypes, s.Check.Pass, load(t, oPath).F32
}

// Half inputs through the CLI: a float16 .npy stays float16 on the device,
// --dtype and --kv-dtype round float32 inputs, and the seed 000 example
// (SEMANTICS.md §18, its values exact in both half types) gives its
// published output either way.
func TestRunHalfInputs(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q := saveF16(t, dir, "q.npy", []int{1, 2}, []float32{1, 0})
	k := saveF16(t, dir, "k.npy", []int{3, 2}, []float32{1, 0, 0, 1, 1, 1})
	v := saveF16(t, dir, "v.npy", []int{3, 2}, []float32{2, 0, 0, 4, 2, 2})
	want := []float64{1.6044, 1.5933}
	types, pass, o := runSummaryOf(t, "-q", q, "-k", k, "-v", v)
	if types != [3]string{"f16", "f16", "f16"} || !pass {
		t.Errorf("float16 files: stored as %v, check passed %v; want f16 and a pass", types, pass)
	}
	testutil.Near(t, "O (float16 files)", o, want, 1e-4)

	q32, k32, v32 := seed000(t, dir)
	types, pass, o = runSummaryOf(t, "-q", q32, "-k", k32, "-v", v32, "--dtype", "bf16")
	if types != [3]string{"bf16", "bf16", "bf16"} || !pass {
		t.Errorf("--dtype bf16: stored as %v, check passed %v", types, pass)
	}
	testutil.Near(t, "O (--dtype bf16)", o, want, 1e-4)

	// Values that round: the check compares with the reference on the
	// rounded values.
	r := []float32{0.1, -0.7, 0.3333, 2.71828, -1.4142, 0.5772, 1.618, -0.0001}
	qr := save(t, dir, "qr.npy", [][]float32{r[:4], r[4:]})
	kr := save(t, dir, "kr.npy", [][]float32{r[1:5], r[3:7], r[2:6]})
	vr := save(t, dir, "vr.npy", [][]float32{r[4:8], r[0:4], r[2:6]})
	types, pass, _ = runSummaryOf(t, "-q", qr, "-k", kr, "-v", vr, "--kv-dtype", "f16", "--causal", "bottom-right")
	if types != [3]string{"f32", "f16", "f16"} || !pass {
		t.Errorf("--kv-dtype f16: stored as %v, check passed %v", types, pass)
	}
	q16 := saveF16(t, dir, "q16.npy", []int{2, 4}, r)
	types, _, _ = runSummaryOf(t, "-q", q16, "-k", kr, "-v", vr, "--dtype", "f32")
	if types != [3]string{"f32", "f32", "f32"} {
		t.Errorf("--dtype f32 on a float16 file: stored as %v", types)
	}

	big := save(t, dir, "big.npy", [][]float32{{1, 0}, {7e4, 1}, {1, 1}})
	checkRefused(t, []string{"run", "-q", q32, "-k", big, "-v", v32, "--dtype", "f16"}, 1, "K "+big+" as f16: vkattn: overflow: element 2: 70000 does not fit f16", "")
	checkRefused(t, []string{"run", "-q", q32, "-k", k32, "-v", v32, "--kv-dtype", "fp8"}, 2, `--kv-dtype "fp8": want f32, f16 or bf16`, "")
}

// bench --kv-dtype stores K and V as halves and counts their bytes so.
func TestBenchHalfKV(t *testing.T) {
	withDevice(t)
	out := cliOK(t, "bench", "--shape", "1,4,2,1,300,8", "--reps", "1", "--kv-dtype", "f16", "--quiet", "--json")
	var rs []struct {
		DTypes [3]string
		Bytes  int64
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs) != 1 {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	// Q 4*8 and O 4*8 float32s, K and V 2*300*8 halves.
	if want := int64(4*4*8 + 2*2*2*300*8 + 4*4*8); rs[0].Bytes != want || rs[0].DTypes != [3]string{"f32", "f16", "f16"} {
		t.Errorf("bench: %d bytes of %v, want %d of f32, f16, f16", rs[0].Bytes, rs[0].DTypes, want)
	}
}

// The score variant flags on the seed 000 example (q = [1, 0]; keys [1, 0],
// [0, 1], [1, 1]; values [2, 0], [0, 4], [2, 2]; scale 1/sqrt(2)), with
// the expected outputs derived by hand from SEMANTICS.md §4.1.
func TestRunScoreVariants(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	s := []float64{1 / math.Sqrt2, 0, 1 / math.Sqrt2} // the scaled scores
	vals := [][2]float64{{2, 0}, {0, 4}, {2, 2}}
	// attend is the softmax of scores (plus a sink logit) over the values.
	attend := func(scores []float64, sink float64) []float64 {
		z := math.Exp(sink)
		var o [2]float64
		for j, x := range scores {
			z += math.Exp(x)
			o[0] += math.Exp(x) * vals[j][0]
			o[1] += math.Exp(x) * vals[j][1]
		}
		return []float64{o[0] / z, o[1] / z}
	}
	alibi := make([]float64, 3)
	capped := make([]float64, 3)
	for j := range s {
		alibi[j] = s[j] + math.Exp2(-8)*float64(j-2) // H = 1: slope 2^-8; t + S - L = 2
		capped[j] = 0.5 * math.Tanh(s[j]/0.5)
	}
	sinks := save(t, dir, "sinks.npy", []float32{0.25})
	for _, c := range []struct {
		name string
		args []string
		want []float64
	}{
		// Query 0 sits at key position 2: window (0, 0) leaves key 2 alone.
		{"window 0,0", []string{"--window", "0,0"}, vals[2][:]},
		{"window 1,-1", []string{"--window", "1,-1"}, attend([]float64{math.Inf(-1), s[1], s[2]}, math.Inf(-1))},
		{"softcap 0.5", []string{"--softcap", "0.5"}, attend(capped, math.Inf(-1))},
		// Sides beyond 32 bits and caps far above the scores mean what
		// they say: every key is in the window, the scores stay as they are.
		{"window 2^32,0", []string{"--window", "4294967296,0"}, attend(s, math.Inf(-1))},
		{"window 0,2^62", []string{"--window", "0,4611686018427387904"}, vals[2][:]},
		{"softcap 1e7", []string{"--softcap", "1e7"}, attend(s, math.Inf(-1))},
		{"softcap 3e38", []string{"--softcap", "3e38"}, attend(s, math.Inf(-1))},
		{"alibi", []string{"--alibi"}, attend(alibi, math.Inf(-1))},
		{"sinks", []string{"--sinks", sinks}, attend(s, 0.25)},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := filepath.Join(t.TempDir(), "o.npy")
			cliOK(t, append([]string{"run", "-q", q, "-k", k, "-v", v, "-o", o, "--check"}, c.args...)...)
			testutil.Near(t, "O", load(t, o).F32, c.want, 1e-6)
		})
	}
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--window", "-2,0"}, 1, "window (-2, 0)", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--softcap", "0"}, 1, "--softcap 0: want a positive cap", "")
	two := save(t, dir, "two.npy", []float32{1, 2})
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--sinks", two}, 1, "want (1,), one value per query head", "")
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--alibi-slopes", two}, 1, "want (1,), one value per query head", "")
}
