package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/vk"
)

// cli runs the command in-process.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return o.String(), e.String(), code
}

// cliOK runs the command in-process, fails the test unless it exits 0 and
// returns its stdout.
func cliOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, args...)
	if code != 0 {
		t.Fatalf("vkattn %s: exit %d: %s\n%s", strings.Join(args, " "), code, errOut, out)
	}
	return out
}

// withDevice turns on the validation layer for a test that
// opens a device and checks at the end that it reported nothing.
func withDevice(t *testing.T) {
	t.Helper()
	// make test installs the layer; a missing one is a failure, not a skip.
	if ok, err := vk.LayerAvailable("VK_LAYER_KHRONOS_validation"); err != nil || !ok {
		t.Fatalf("Vulkan validation layer unavailable (ok=%v): %v", ok, err)
	}
	t.Setenv("VKATTN_VALIDATION", "1")
	before := len(vkattn.ValidationMessages())
	t.Cleanup(func() {
		if msgs := vkattn.ValidationMessages()[before:]; len(msgs) > 0 {
			t.Errorf("validation layer reported %d messages, first: %s", len(msgs), msgs[0])
		}
	})
}

// save writes v (a slice or nested slices) as a .npy file with npyio.
// parseJSON is a command's --json output as a T; the test stops if it
// does not parse.
func parseJSON[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("--json output does not parse as %T: %v\n%s", v, err, out)
	}
	return v
}

func save(t *testing.T, dir, name string, v any) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := npyio.Write(f, v); err != nil {
		t.Fatal(err)
	}
	return path
}

// seed000 writes the seed 000 inputs (SEMANTICS.md §18) and returns their paths.
func seed000(t *testing.T, dir string) (q, k, v string) {
	q = save(t, dir, "q.npy", [][]float32{{1, 0}})
	k = save(t, dir, "k.npy", [][]float32{{1, 0}, {0, 1}, {1, 1}})
	v = save(t, dir, "v.npy", [][]float32{{2, 0}, {0, 4}, {2, 2}})
	return q, k, v
}

// load reads an output back (with npyio underneath).
func load(t *testing.T, path string) *npyArray {
	t.Helper()
	a, err := readNPY(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRunSpecExample(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q, k, v := seed000(t, dir)

	out := cliOK(t, "run", "-q", q, "-k", k, "-v", v)
	if !strings.Contains(out, "O (1, 2): [1.6044") || !strings.Contains(out, "plan: ") || !strings.Contains(out, "GPU time") {
		t.Errorf("summary:\n%s", out)
	}

	o := filepath.Join(dir, "o.npy")
	cliOK(t, "run", "-q", q, "-k", k, "-v", v, "-o", o, "--check")
	got := load(t, o)
	if !slices.Equal(got.Shape, []int{1, 2}) {
		t.Errorf("O shape %v, want [1 2]", got.Shape)
	}
	testutil.Near(t, "O", got.F32, []float64{1.6044, 1.5933}, 1e-4)

	// float64 inputs are converted.
	q64 := save(t, dir, "q64.npy", [][]float64{{1, 0}})
	cliOK(t, "run", "-q", q64, "-k", k, "-v", v, "-o", o)
	testutil.Near(t, "O from float64 Q", load(t, o).F32, []float64{1.6044, 1.5933}, 1e-4)
}

func TestRunMask(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	m := save(t, dir, "m.npy", [][]float32{{0, 0, float32(math.Inf(-1))}})
	o := filepath.Join(dir, "o.npy")
	w := filepath.Join(dir, "w.npy")
	cliOK(t, "run", "-q", q, "-k", k, "-v", v, "--mask", m, "-o", o, "--weights", w, "--check")
	testutil.Near(t, "O", load(t, o).F32, []float64{1.3395, 1.3210}, 1e-4)
	weights := load(t, w)
	if !slices.Equal(weights.Shape, []int{1, 3}) {
		t.Errorf("weights shape %v, want [1 3]", weights.Shape)
	}
	testutil.Near(t, "A", weights.F32, []float64{0.6698, 0.3302, 0}, 1e-4)

	// A rank-1 mask over the keys broadcasts the same way.
	m1 := save(t, dir, "m1.npy", []float32{0, 0, float32(math.Inf(-1))})
	cliOK(t, "run", "-q", q, "-k", k, "-v", v, "--mask", m1, "-o", o)
	testutil.Near(t, "O with rank-1 mask", load(t, o).F32, []float64{1.3395, 1.3210}, 1e-4)
}

// TestAllowBlockPolarity: --allow keeps the keys where a mask is true,
// --block drops them; the flags repeat and mix, and a key is visible only
// where every bool mask allows it (seed 000, SEMANTICS.md §18: O is then
// the one value row left).
func TestAllowBlockPolarity(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	ttf := save(t, dir, "ttf.npy", [][]bool{{true, true, false}})
	fft := save(t, dir, "fft.npy", [][]bool{{false, false, true}})
	ftt := save(t, dir, "ftt.npy", [][]bool{{false, true, true}})
	ftf := save(t, dir, "ftf.npy", [][]bool{{false, true, false}})
	o := filepath.Join(dir, "o.npy")
	masked := []float64{1.3395, 1.3210} // SEMANTICS.md §18: M = [0 0 -inf]
	for _, c := range []struct {
		name  string
		masks []string
		want  []float64
	}{
		{"allow 1,2", []string{"--allow", ttf}, masked},
		{"block 3: the same", []string{"--block", fft}, masked},
		{"block 1,2: O = v3", []string{"--block", ttf}, []float64{2, 2}},
		{"allow 3", []string{"--allow", fft}, []float64{2, 2}},
		{"causal, L=1: key 1 only, O = v1", []string{"--causal", "top-left"}, []float64{2, 0}},
		{"allow 1,2 and block 2: key 1", []string{"--allow", ttf, "--block", ftf}, []float64{2, 0}},
		{"allow 1,2 and allow 2,3: key 2", []string{"--allow", ttf, "--allow", ftt}, []float64{0, 4}},
		{"block 2 and allow 2,3 and block 2 again: key 3", []string{"--block", ftf, "--allow", ftt, "--block", ftf}, []float64{2, 2}},
	} {
		args := append([]string{"run", "-q", q, "-k", k, "-v", v, "-o", o, "--check"}, c.masks...)
		cliOK(t, args...)
		testutil.Near(t, c.name, load(t, o).F32, c.want, 1e-4)
	}
}

func TestRunShapesGQA(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	// Q (H=2, L=1, 2): head 0 the seed 000 query, head 1 a zero query; K and
	// V rank 2 are one shared head (multi-query).
	_, k, v := seed000(t, dir)
	q := save(t, dir, "q3.npy", [][][]float32{{{1, 0}}, {{0, 0}}})
	o, lse, w := filepath.Join(dir, "o.npy"), filepath.Join(dir, "lse.npy"), filepath.Join(dir, "w.npy")
	out := cliOK(t, "run", "-q", q, "-k", k, "-v", v, "-o", o, "--lse", lse, "--weights", w, "--check", "--json")
	var s struct {
		Dims    vkattn.Dims
		Written []string
		Check   struct {
			MaxAbs float64 `json:"max_abs_err"`
			Pass   bool
		}
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out)
	}
	if s.Dims.H != 2 || s.Dims.HKV != 1 || !s.Check.Pass || len(s.Written) != 3 {
		t.Errorf("summary %+v", s)
	}
	for _, c := range []struct {
		path  string
		shape []int
	}{{o, []int{2, 1, 2}}, {lse, []int{2, 1}}, {w, []int{2, 1, 3}}} {
		if a := load(t, c.path); !slices.Equal(a.Shape, c.shape) {
			t.Errorf("%s: shape %v, want %v", filepath.Base(c.path), a.Shape, c.shape)
		}
	}
	testutil.Near(t, "O", load(t, o).F32, []float64{1.6044, 1.5933, 4.0 / 3, 2}, 1e-4)
	third := 1.0 / 3
	testutil.Near(t, "A", load(t, w).F32, []float64{0.4011, 0.1978, 0.4011, third, third, third}, 1e-4)
	testutil.Near(t, "LSE head 1", load(t, lse).F32[1:], []float64{math.Log(3)}, 1e-5)
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	k4 := save(t, dir, "k4.npy", [][]float32{{1, 0}, {0, 1}, {1, 1}, {1, 1}})
	k3w := save(t, dir, "k3w.npy", [][]float32{{1, 0, 0}, {0, 1, 0}, {1, 1, 0}})
	allow := save(t, dir, "allow.npy", [][]bool{{true, true, false}})
	floatMask := save(t, dir, "fm.npy", [][]float32{{0, 0, 0}})
	wideMask := save(t, dir, "wide.npy", [][]float32{{0, 0, 0, 0}})
	nanQ := save(t, dir, "nan.npy", [][]float32{{float32(math.NaN()), 0}})
	hugeQ := save(t, dir, "huge.npy", [][]float32{{3e38, 3e38}, {3e38, 3e38}, {3e38, 3e38}}) // as Q and K: q.k ~ 2e77
	rank1 := save(t, dir, "rank1.npy", []float32{1, 0})
	garbage := filepath.Join(dir, "garbage.npy")
	os.WriteFile(garbage, []byte("not an npy file at all"), 0o644)
	valid, _ := os.ReadFile(q)
	truncated := filepath.Join(dir, "truncated.npy")
	os.WriteFile(truncated, valid[:len(valid)-3], 0o644)
	intArr := save(t, dir, "int.npy", []int32{1, 0})

	o := filepath.Join(dir, "out.npy")
	for name, args := range map[string][]string{
		"missing -q":           {"-k", k, "-v", v},
		"K/V lengths differ":   {"-q", q, "-k", k4, "-v", v},
		"Q/K widths differ":    {"-q", q, "-k", k3w, "-v", v},
		"bad causal":           {"-q", q, "-k", k, "-v", v, "--causal", "diagonal"},
		"garbage npy":          {"-q", garbage, "-k", k, "-v", v},
		"truncated npy":        {"-q", truncated, "-k", k, "-v", v},
		"int npy":              {"-q", intArr, "-k", k, "-v", v},
		"missing file":         {"-q", filepath.Join(dir, "nope.npy"), "-k", k, "-v", v},
		"rank-1 Q":             {"-q", rank1, "-k", k, "-v", v},
		"NaN in Q":             {"-q", nanQ, "-k", k, "-v", v},
		"float --allow":        {"-q", q, "-k", k, "-v", v, "--allow", floatMask},
		"bool --mask":          {"-q", q, "-k", k, "-v", v, "--mask", allow},
		"mask too wide":        {"-q", q, "-k", k, "-v", v, "--mask", wideMask},
		"key lengths count":    {"-q", q, "-k", k, "-v", v, "--key-lengths", "3,2"},
		"key length too long":  {"-q", q, "-k", k, "-v", v, "--key-lengths", "4"},
		"key lengths not ints": {"-q", q, "-k", k, "-v", v, "--key-lengths", "a,b"},
		"infinite scale":       {"-q", q, "-k", k, "-v", v, "--scale", "inf"},
		"scale 1e39":           {"-q", q, "-k", k, "-v", v, "--scale", "1e39"},
		"scale 3.5e38":         {"-q", q, "-k", k, "-v", v, "--scale", "3.5e38"},
		"scale 1e308":          {"-q", q, "-k", k, "-v", v, "--scale", "1e308"},
		"scores overflow":      {"-q", hugeQ, "-k", hugeQ, "-v", v},
		"unknown flag":         {"-q", q, "-k", k, "-v", v, "--causl", "top-left"},
		"stray argument":       {"-q", q, "-k", k, "-v", v, "extra"},
		"same output twice":    {"-q", q, "-k", k, "-v", v, "--lse", o},
		"no such device":       {"-q", q, "-k", k, "-v", v, "--device", "no-such-gpu-anywhere"},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			args := append([]string{"run"}, args...)
			args = append(args, "-o", o)
			_, errOut, code := cli(t, args...)
			if code == 0 {
				t.Errorf("exit 0")
			}
			if strings.TrimSpace(errOut) == "" {
				t.Errorf("nothing on stderr")
			}
			if _, err := os.Stat(o); err == nil {
				t.Errorf("output file written")
				os.Remove(o)
			}
			if strings.Contains(errOut, "panic") {
				t.Errorf("stderr: %s", errOut)
			}
		})
	}
	// Nothing may be left behind, temporary files included.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if _, errOut, code := cli(t, "run", "-q", q, "-k", k, "-v", v, "-o", filepath.Join(dir, "no", "such", "dir", "o.npy")); code == 0 || errOut == "" {
		t.Errorf("output into a missing directory: exit %d, stderr %q", code, errOut)
	}
}

// TestReadNPYMalformed cuts and corrupts a valid file at every byte of its
// header: readNPY must return an error, never panic.
func TestReadNPYMalformed(t *testing.T) {
	dir := t.TempDir()
	valid, err := os.ReadFile(save(t, dir, "q.npy", [][]float32{{1, 2}, {3, 4}}))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bad.npy")
	for i := 0; i < len(valid); i++ {
		for _, data := range [][]byte{
			valid[:i],
			append(append(append([]byte(nil), valid[:i]...), '}'), valid[i+1:]...),
			append(append(append([]byte(nil), valid[:i]...), 0xff), valid[i+1:]...),
		} {
			if bytes.Equal(data, valid) {
				continue
			}
			os.WriteFile(path, data, 0o644)
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("byte %d: panic %v", i, r)
					}
				}()
				readNPY(path)
			}()
		}
	}
	// A header claiming a huge shape must not allocate it.
	huge := bytes.Replace(valid, []byte("(2, 2)"), []byte("(99999999, 99999999)"), 1)
	os.WriteFile(path, huge, 0o644)
	if _, err := readNPY(path); err == nil {
		t.Error("huge claimed shape accepted")
	}
}

func TestNPYFortranAndRoundTrip(t *testing.T) {
	dir := t.TempDir()
	// A (2,3) float32 array stored column-major, as NumPy writes an array
	// with order='F'.
	dict := "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"
	hdr := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)+1), 0)
	hdr = append(append(hdr, dict...), '\n')
	for _, x := range []float32{1, 4, 2, 5, 3, 6} {
		hdr = binary.LittleEndian.AppendUint32(hdr, math.Float32bits(x))
	}
	path := filepath.Join(dir, "f.npy")
	os.WriteFile(path, hdr, 0o644)
	a, err := readNPY(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Shape, []int{2, 3}) || !slices.Equal(a.F32, []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("Fortran order: shape %v values %v", a.Shape, a.F32)
	}

	// What we write, npyio reads with the same shape and values.
	out := filepath.Join(dir, "out.npy")
	vals := []float32{1, -2, float32(math.Inf(-1)), 4, 5, 6, 7, 8}
	if err := writeNPYFiles([]output{{"O", out, []int{2, 1, 2, 2}, vals}}); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := npyio.NewReader(bytes.NewReader(written))
	if err != nil {
		t.Fatal(err)
	}
	var back []float32
	if err := r.Read(&back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Header.Descr.Shape, []int{2, 1, 2, 2}) || !slices.Equal(back, vals) {
		t.Errorf("round trip: shape %v values %v", r.Header.Descr.Shape, back)
	}
}

func TestVerify(t *testing.T) {
	withDevice(t)
	out := cliOK(t, "verify", "--dir", "../../testdata")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !regexp.MustCompile(`^[1-9][0-9]* passed, 0 failed$`).MatchString(last) {
		t.Errorf("last line %q\n%s", last, out)
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasSuffix(l, "PASS") {
			t.Errorf("line %q", l)
		}
	}

	// --random: random problems against the reference, here under the
	// NVIDIA plan (the tiled kernels).
	out = cliOK(t, "verify", "--dir", "../../testdata", "--run", "seed000_plain", "--random", "4", "--plan-as", "nvidia")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; last != "5 passed, 0 failed" || strings.Count(out, "random0") != 4 ||
		strings.Count(out, ": attention_tiled_storage_") != 4 {
		t.Errorf("verify --random 4 --plan-as nvidia:\n%s", out)
	}
	if _, _, code := cli(t, "verify", "--random", "-1"); code != 2 {
		t.Errorf("verify --random -1: exit %d, want 2", code)
	}

	// A case whose expectation is wrong must fail, with exit status 1.
	dir := t.TempDir()
	wrong := `{"name": "wrong", "source": "test", "q": {"shape": [1,2], "values": [1,0]},
	  "k": {"shape": [3,2], "values": [1,0,0,1,1,1]}, "v": {"shape": [3,2], "values": [2,0,0,4,2,2]},
	  "expect": {"O": {"shape": [1,2], "values": [1.6, 1.6]}, "tolerance": 1e-4}}`
	os.WriteFile(filepath.Join(dir, "wrong.json"), []byte(wrong), 0o644)
	out, _, code := cli(t, "verify", "--dir", dir)
	if code == 0 || !strings.HasSuffix(strings.TrimSpace(out), "0 passed, 1 failed") || !strings.Contains(out, "FAIL") {
		t.Errorf("wrong case: exit %d\n%s", code, out)
	}

	if _, errOut, code := cli(t, "verify", "--dir", filepath.Join(dir, "missing")); code == 0 || errOut == "" {
		t.Errorf("missing dir: exit %d, stderr %q", code, errOut)
	}
}

func TestDevicesJSON(t *testing.T) {
	withDevice(t)
	out := cliOK(t, "devices", "--json")
	var s struct {
		Default int          `json:"default"`
		Devices []deviceJSON `json:"devices"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(s.Devices) == 0 || s.Default < 0 || s.Default >= len(s.Devices) || !s.Devices[s.Default].Default {
		t.Fatalf("%+v", s)
	}
	for _, d := range s.Devices {
		if d.Name == "" || d.Type == "" || d.Limits.MaxStorageBufferRange == 0 || d.Limits.MaxWorkGroupSize[0] == 0 {
			t.Errorf("device %+v", d)
		}
	}
	out, _, code := cli(t, "devices")
	if code != 0 || !strings.Contains(out, "(default)") || !strings.Contains(out, "max storage buffer range") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
}

func TestHelp(t *testing.T) {
	for _, c := range []string{"devices", "run", "verify", "demo"} {
		out, _, code := cli(t, c, "-h")
		if code != 0 || !strings.Contains(out, "Example") || !strings.Contains(out, "Flags:") {
			t.Errorf("%s -h: exit %d\n%s", c, code, out)
		}
	}
	if out, _, code := cli(t, "--help"); code != 0 || !strings.Contains(out, "Commands:") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
	if _, errOut, code := cli(t); code == 0 || !strings.Contains(errOut, "Commands:") {
		t.Errorf("no arguments: exit %d", code)
	}
	if _, errOut, code := cli(t, "frobnicate"); code == 0 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("unknown command: exit %d, %q", code, errOut)
	}
}

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a d=64 kernel variant")
	}
	withDevice(t)
	out := cliOK(t, "demo")
	for _, want := range []string{"O = [1.604", "O = [1.339", "O = [1.500000 1.500000]", "1.333333 1.333333", "random problem", "first call (compiling its kernel included)", "GPU time (the median of 3 more calls)", "check vs float64 reference",
		"training: attention learns to reverse", "key position [7 6 5 4 3 2 1 0]"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// checkRefused runs the CLI with args and checks that it exits with code,
// says want on stderr, does not panic and writes no output file.
func checkRefused(t *testing.T, args []string, code int, want, output string) {
	t.Helper()
	_, errOut, got := cli(t, args...)
	if got != code || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, want %d; stderr lacks %q:\n%s", got, code, want, errOut)
	}
	if strings.Contains(errOut, "panic") {
		t.Errorf("stderr: %s", errOut)
	}
	if _, err := os.Stat(output); err == nil {
		t.Errorf("output file written")
		os.Remove(output)
	}
}

// TestPlanAs: --plan-as plans as another vendor's driver (the tiled kernels
// on lavapipe, named by --explain with their tiles) and gives the same
// output as the device's own plan; an unknown vendor is a usage error.
func TestPlanAs(t *testing.T) {
	withDevice(t)
	t.Setenv("VKATTN_PLAN_AS", "") // "own" is the device's own plan
	args := []string{"run", "-q", "../../testdata/example/q.npy", "-k", "../../testdata/example/k.npy", "-v", "../../testdata/example/v.npy", "--check"}
	own := cliOK(t, args...)
	tiled := cliOK(t, append(args, "--plan-as", "amd", "--explain")...)
	for _, want := range []string{"attention_tiled_storage_", "planned as amd", "Br 16 query rows", "full subgroups of", "O (1, 2): [1.60445 1.59333]"} {
		if !strings.Contains(tiled, want) {
			t.Errorf("run --plan-as amd --explain does not say %q:\n%s", want, tiled)
		}
	}
	// lavapipe's own plan runs the row kernels; a GPU's own plan may tile.
	infos, def, err := vkattn.Devices()
	lavapipe := err == nil && infos[def].DriverID == core.DriverIDLavapipe
	if !strings.Contains(own, "O (1, 2): [1.60445 1.59333]") || lavapipe && strings.Contains(own, "attention_tiled") {
		t.Errorf("run on the device's own plan:\n%s", own)
	}
	if _, errOut, code := cli(t, append(args, "--plan-as", "apple")...); code != 2 || !strings.Contains(errOut, "unknown vendor") {
		t.Errorf("--plan-as apple: exit %d, stderr %q", code, errOut)
	}
}
