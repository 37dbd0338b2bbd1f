package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vkattn/vkattn/internal/harness"
	"github.com/vkattn/vkattn/tune"
)

// benchJSON runs bench with --json and decodes its results.
func benchJSON(t *testing.T, args ...string) []benchResult {
	t.Helper()
	out, errOut, code := cli(t, append([]string{"bench", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("bench %v: exit %d\nstderr: %s", args, code, errOut)
	}
	rs := parseJSON[[]benchResult](t, out)
	return rs
}

func TestBenchShapeJSON(t *testing.T) {
	withDevice(t)
	rs := benchJSON(t, "--shape", "1,2,1,16,16,8", "--reps", "2")
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1: %+v", len(rs), rs)
	}
	r := rs[0]
	d := r.Dims
	if d.B != 1 || d.H != 2 || d.HKV != 1 || d.L != 16 || d.S != 16 || d.DK != 8 || d.DV != 8 {
		t.Errorf("dims %+v, want B=1 H=2 H_kv=1 L=S=16 d=8", d)
	}
	if r.Causal != "none" || r.Reps != 2 || r.Suite != "" {
		t.Errorf("causal %q, reps %d, suite %q", r.Causal, r.Reps, r.Suite)
	}
	if r.Variant == "" || (r.Rows <= 0) == (r.TileRows <= 0) || r.WorkGroup <= 0 || r.Plan == "" || r.Device == "" {
		t.Errorf("plan fields missing: %+v", r)
	}
	if want := 4.0 * 1 * 2 * 16 * 16 * 8; r.FLOPs != want {
		t.Errorf("flops %v, want 4*B*H*L*S*d = %v", r.FLOPs, want)
	}
	// Q (1,2,16,8) and O (1,2,16,8) plus K and V (1,1,16,8), 4 bytes each.
	if want := int64(4 * (2*256 + 2*128)); r.Bytes != want {
		t.Errorf("bytes %d, want %d", r.Bytes, want)
	}
	if !(r.GFLOPS > 0 && r.GBPS > 0) {
		t.Errorf("GFLOP/s %v, GB/s %v: want both > 0", r.GFLOPS, r.GBPS)
	}
	// A prepared call's Run: one submission, one wait, nothing allocated
	// or staged.
	if r.Submits != 1 || r.Waits != 1 || r.Allocs != 0 || r.StagingBytes != 0 {
		t.Errorf("per call: %v submissions, %v waits, %d allocations, %v bytes staged; want 1, 1, 0, 0", r.Submits, r.Waits, r.Allocs, r.StagingBytes)
	}
	ordered := func(s tune.Stats) bool { return 0 < s.Min && s.Min <= s.Median && s.Median <= s.Max }
	if !ordered(r.Wall) || r.ColdWallNS <= 0 {
		t.Errorf("wall times %+v, cold %d", r.Wall, r.ColdWallNS)
	}
	switch r.Timing {
	case "gpu":
		if !ordered(r.GPU) {
			t.Errorf("GPU times %+v", r.GPU)
		}
	case "wall":
		if r.GPU != (tune.Stats{}) {
			t.Errorf("timing wall but GPU times %+v", r.GPU)
		}
	default:
		t.Errorf("timing %q, want gpu or wall", r.Timing)
	}
}

func TestBenchCausalTable(t *testing.T) {
	withDevice(t)
	// Two shapes in one flag; the causal FLOP count is halved.
	rs := benchJSON(t, "--shape", "1,2,1,16,16,8;1,1,1,8,24,8", "--causal", "--reps", "1")
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	for _, r := range rs {
		if r.Causal != "bottom-right" {
			t.Errorf("causal %q, want bottom-right", r.Causal)
		}
		d := r.Dims
		if want := 2 * float64(d.B*d.H*d.L*d.S*d.DK); r.FLOPs != want {
			t.Errorf("%+v: flops %v, want half of 4*B*H*L*S*d = %v", d, r.FLOPs, want)
		}
	}

	out, errOut, code := cli(t, "bench", "--shape", "1,2,1,16,16,8", "--shape", "1,2,2,16,16,8", "--causal=top-left", "--reps", "1")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "device: ") ||
		!strings.Contains(lines[1], "GFLOP/s") || !strings.Contains(lines[1], "kernel") {
		t.Fatalf("table:\n%s", out)
	}
	for _, l := range lines[2:4] {
		if !strings.Contains(l, "top-left") || !strings.Contains(l, "attention_") {
			t.Errorf("row %q: want the causal alignment and the kernel variant", l)
		}
	}
	// Aligned: header and rows end their GB/s column at the same place.
	if n := utf8.RuneCountInString; n(lines[1]) != n(lines[2]) || n(lines[2]) != n(lines[3]) {
		t.Errorf("rows not aligned:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("stderr not quiet for a non-file writer: %q", errOut)
	}
}

func TestBenchPlot(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	png := filepath.Join(dir, "gflops.png")
	out, errOut, code := cli(t, "bench", "--shape", "1,2,1,16,16,8;1,2,1,32,32,8", "--reps", "1", "--plot", png)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "wrote "+png) {
		t.Errorf("output does not name the plot:\n%s", out)
	}
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("%s is not a PNG (starts %q)", png, b[:min(len(b), 8)])
	}
	// Written by rename: no temporary file is left beside it.
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the plot", len(entries))
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shape", "1,2,3"}, "6 integers per shape"},
		{[]string{"--shape", "1,2,1,16,16,x"}, "not an integer"},
		{[]string{"--shape", "1,4,3,16,16,8"}, "does not divide"},
		{[]string{"--shape", "1,2,1,0,16,8"}, "at least 1"},
		{[]string{"--shape", ""}, "want B,H,H_kv,L,S,d"},
		{[]string{"--suite", "decode", "--shape", "1,1,1,4,4,4"}, "mutually exclusive"},
		{[]string{"--suite", "huge"}, "want prefill, decode, long, all, decode-loop, fork, cascade, serve or mha-train"},
		{[]string{"--suite", "cascade", "--backward"}, "--backward times the suites prefill, decode, long and all"},
		{[]string{"--causal"}, "--causal applies to --shape"},
		{[]string{"--shape", "1,1,1,4,4,4", "--causal=sideways"}, "top-left"},
		{[]string{"--shape", "1,1,1,4,4,4", "--reps", "0"}, "at least 1"},
		{[]string{"--shape", "1,1,1,4,4,4", "--plot", "x.gif"}, "unknown image format"},
		{[]string{"--shape", "1,1,1,4,4,4", "--load-path", "fast"}, "auto, texel or storage"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		out, errOut, code := cli(t, append([]string{"bench"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("bench %q: exit %d, stderr %q, stdout %q; want exit %d and a message with %q",
				c.args, code, errOut, out, exitUsage, c.want)
		}
	}
}

func TestBenchHelp(t *testing.T) {
	out, _, code := cli(t, "bench", "-h")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	mentions(t, "bench -h", out, "Examples:", "Flags:", "--suite", "prefill", "--shape", "halved", "GB/s", "-plot")
	if top, _, _ := cli(t, "-h"); !strings.Contains(top, "bench") {
		t.Errorf("top usage does not list bench:\n%s", top)
	}
}

func TestBenchSuites(t *testing.T) {
	count := map[string]int{}
	for _, s := range append(harness.Suites, "all") {
		for _, c := range harness.SuiteCases(s) {
			count[s]++
			d := c.Dims
			if d.DK != d.DV || d.B != 1 || d.H%d.HKV != 0 {
				t.Errorf("%s: %s", s, c.Name())
			}
		}
	}
	if count["prefill"] != 12 || count["decode"] != 3 || count["long"] != 3 || count["all"] != 18 {
		t.Errorf("suite sizes %v, want prefill 12, decode 3, long 3, all 18", count)
	}
}

// bench --backward times the gradients: FLOPs 3.5 times the forward's,
// marked in the JSON; the cache suites refuse it.
func TestBenchBackward(t *testing.T) {
	withDevice(t)
	out := cliOK(t, "bench", "--shape", "1,2,2,64,64,16", "--backward", "--reps", "2", "--quiet", "--json")
	rs := parseJSON[[]benchResult](t, out)
	if len(rs) != 1 || !rs[0].Backward || rs[0].FLOPs != 3.5*4*2*64*64*16 || rs[0].GFLOPS <= 0 {
		t.Errorf("results %+v", rs)
	}
	checkRefused(t, []string{"bench", "--suite", "fork", "--backward"}, 2, "--backward times", "")
	checkRefused(t, []string{"bench", "--backward", "--kv-dtype", "q8_0", "--shape", "1,1,1,8,8,32"}, 2, "the backward reads float K and V", "")
	checkRefused(t, []string{"bench", "--backward", "--kv-dtype", "q4_0"}, 2, "the backward reads float K and V", "")
}

// bench --mha-train times an MHA layer's training step: its forward and
// its backward call, one submission each, and their FLOPs (3x the dense
// layers' 2*rows*in*out plus 3.5x the attention's 4*B*H*L*S*d); flags of
// the attention benchmarks are refused with it.
func TestBenchMHATrain(t *testing.T) {
	withDevice(t)
	out := cliOK(t, "bench", "--mha-train", "1,8,16,2", "--reps", "2", "--quiet", "--json")
	rs := parseJSON[[]trainResult](t, out)
	const rows, e = 8, 16
	flops := 3*(2*rows*e*3*e+2*rows*e*e) + 3.5*(4*2*8*8*8)
	if len(rs) != 1 || rs[0].FLOPs != flops || rs[0].GFLOPS <= 0 || rs[0].Submits != 2 || rs[0].Waits != 2 || rs[0].Reps != 2 {
		t.Errorf("results %+v, want FLOPs %g and 2 submissions a step", rs, flops)
	}
	if r := rs[0]; r.Timing == "gpu" && (r.ForwardGPU.Median <= 0 || r.BackwardGPU.Median <= 0) {
		t.Errorf("forward and backward medians %d and %d ns", r.ForwardGPU.Median, r.BackwardGPU.Median)
	}
	text := cliOK(t, "bench", "--mha-train", "1,8,16,2", "--reps", "1", "--quiet")
	mentions(t, "bench --mha-train", text, "forward", "backward", "GFLOP/s")
	checkRefused(t, []string{"bench", "--mha-train", "1,8,16,2", "--backward"}, 2, "--backward does not apply", "")
	checkRefused(t, []string{"bench", "--suite", "mha-train", "--dtype", "f16"}, 2, "--dtype does not apply", "")
	checkRefused(t, []string{"bench", "--mha-train", "1,8,16,3"}, 2, "3 heads do not divide E = 16", "")
}
