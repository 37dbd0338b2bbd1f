package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/harness"
	"github.com/vkattn/vkattn/internal/testutil"
)

// decodeTokens is the sequence length of decodeFiles.
const decodeTokens = 23

// decodeFiles writes a decode problem drawn from seed into dir: Q (2, 4,
// T, 8), K and V (2, 2, T, 8) of T = decodeTokens tokens.
func decodeFiles(t *testing.T, dir string, seed uint64) (q, k, v string) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	const B, H, HKV, T, D = 2, 4, 2, decodeTokens, 8
	q, _ = randomNPY(t, r, dir, "q.npy", [4]int{B, H, T, D})
	k, _ = randomNPY(t, r, dir, "k.npy", [4]int{B, HKV, T, D})
	v, _ = randomNPY(t, r, dir, "v.npy", [4]int{B, HKV, T, D})
	return q, k, v
}

// decode's loop through the cache gives full bottom-right causal attention
// over the sequence: --check against the reference, and the same O as
// run --causal bottom-right on the same files, contiguous and paged, in
// float32 and float16 caches, with a window.
func TestDecode(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	const T = decodeTokens
	q, k, v := decodeFiles(t, dir, 7)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"contiguous", []string{"--prefill", "5"}},
		{"paged f16", []string{"--prefill", "7", "--page", "4", "--kv-dtype", "f16"}},
		{"paged window", []string{"--prefill", "1", "--page", "3", "--window", "5,0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := filepath.Join(t.TempDir(), "o.npy")
			out := cliOK(t, append([]string{"decode", "-q", q, "-k", k, "-v", v, "-o", o, "--check", "--json"}, c.args...)...)
			s := parseJSON[decodeSummary](t, out)
			if s.Check == nil || !s.Check.Pass || s.Steps+s.Prefill != T || !(s.TokensPerSec > 0) {
				t.Errorf("summary %+v", s)
			}
			// The same attention in one call: run's kernel on the whole
			// sequence (the cache's values rounded as decode stores them).
			ro := filepath.Join(t.TempDir(), "ro.npy")
			runArgs := []string{"run", "-q", q, "-k", k, "-v", v, "--causal", "bottom-right", "-o", ro}
			for i := 0; i+1 < len(c.args); i += 2 {
				if c.args[i] == "--kv-dtype" || c.args[i] == "--window" {
					runArgs = append(runArgs, c.args[i], c.args[i+1])
				}
			}
			cliOK(t, runArgs...)
			testutil.Near(t, "O from decode against run's", load(t, o).F32, load(t, ro).F32, 2e-5)
		})
	}
	checkRefused(t, []string{"decode", "-q", q, "-k", k, "-v", v, "--prefill", "0"}, 2, "--prefill 0: want 1..T (T = 23)", "")
	checkRefused(t, []string{"decode", "-q", q, "-k", k, "-v", v, "--page", "-1"}, 2, "--page -1", "")
	checkRefused(t, []string{"decode", "-q", q, "-k", k, "-v", v, "--window-cache", "1099511627776", "--page", "4", "--window", "1,0"}, 2, "--window-cache 1099511627776: want at most T (T = 23)", "")
	short := save(t, dir, "short.npy", [][]float32{{1, 2, 3, 4, 5, 6, 7, 8}})
	checkRefused(t, []string{"decode", "-q", q, "-k", short, "-v", v}, 1, "one sequence length T", "")
}

// decode --schedule runs the steps of a server batching two sequences
// (chunks, single tokens and idle steps mixed) as ragged steps: the same O
// as run --causal bottom-right, --check passing, contiguous and paged;
// schedules that do not append every token once are usage errors.
func TestDecodeSchedule(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q, k, v := decodeFiles(t, dir, 11)
	schedule := filepath.Join(dir, "steps.txt")
	writeFile(t, schedule, "# sequence 0, sequence 1\n5 0\n1 9\n\n1,1\n0 1\n16 12\n")
	ro := filepath.Join(dir, "ro.npy")
	cliOK(t, "run", "-q", q, "-k", k, "-v", v, "--causal", "bottom-right", "--kv-dtype", "f16", "-o", ro)
	for _, page := range []string{"0", "4"} {
		o := filepath.Join(t.TempDir(), "o.npy")
		out := cliOK(t, "decode", "-q", q, "-k", k, "-v", v, "--schedule", schedule, "--page", page, "--kv-dtype", "f16", "--check", "--json", "-o", o)
		s := parseJSON[decodeSummary](t, out)
		if s.Check == nil || !s.Check.Pass || s.Steps != 5 || s.Prefill != 0 || !strings.Contains(s.StepPlan, "prefill part: 1 sequence(s)") {
			t.Errorf("page %s: summary %+v", page, s)
		}
		testutil.Near(t, "O from decode --schedule against run's", load(t, o).F32, load(t, ro).F32, 2e-5)
	}
	for _, c := range []struct{ text, want string }{
		{"5 0\n", "sequence 0 brings 5 tokens over the schedule, want T = 23"},
		{"5 0 1\n", "step 1 has 3 counts, want one per sequence (2)"},
		{"23 -1\n0 24\n", "step 1: sequence 1 brings -1 tokens"},
		{"23 x\n", `line 1: "x" is not a count of tokens`},
	} {
		bad := filepath.Join(t.TempDir(), "bad.txt")
		writeFile(t, bad, c.text)
		checkRefused(t, []string{"decode", "-q", q, "-k", k, "-v", v, "--schedule", bad}, 2, c.want, "")
	}
	checkRefused(t, []string{"decode", "-q", q, "-k", k, "-v", v, "--schedule", schedule, "--prefill", "3"}, 2, "leave out --prefill", "")
}

// bench --suite decode-loop on a small shape: every layout and type, a
// cache as long as the length and one four times longer, on lavapipe's
// own plan and memory and as NVIDIA with discrete memory: each step is one
// submission and one host wait, stages its token, query and output, and
// allocates nothing.
func TestBenchDecodeLoop(t *testing.T) {
	withDevice(t)
	saved := cacheSuite
	cacheSuite.H, cacheSuite.HKV, cacheSuite.D, cacheSuite.Page = 4, 2, 32, 64
	cacheSuite.Cases = []harness.LoopCase{{Length: 300, Capacity: 300}, {Length: 300, Capacity: 1200}}
	defer func() { cacheSuite = saved }()
	for _, planAs := range []string{"", "nvidia"} {
		args := []string{"bench", "--suite", "decode-loop", "--reps", "3", "--quiet", "--json"}
		if planAs != "" {
			args = append(args, "--plan-as", planAs)
		}
		out := cliOK(t, args...)
		rs := parseJSON[[]harness.LoopResult](t, out)
		if len(rs) != 16 {
			t.Fatalf("%d results, want 16 (two capacities, contiguous and paged, f32, f16, q8_0 and q4_0)", len(rs))
		}
		for _, r := range rs {
			if r.Length != 300 || !(r.StepsPerS > 0) || r.Allocs != 0 || r.Submits != 1 || r.Waits != 1 || r.StagingBytes <= 0 {
				t.Errorf("plan as %q: result %+v: want cache length 300, a rate, no allocation, 1 submission and 1 wait, staged bytes", planAs, r)
			}
		}
		if rs[4].Cache != "paged 64" || rs[1].DType != "f16" || rs[2].DType != "q8_0" || rs[3].DType != "q4_0" || rs[0].Capacity != 300 || rs[8].Capacity != 1200 {
			t.Errorf("results in the wrong order: %+v", rs)
		}
		// K and V of 2 heads of 32: 4 bytes, 2, 34 per 32 (0.53x f16) and
		// 18 per 32 (0.28x f16).
		for i, want := range []int{512, 256, 136, 72} {
			if got := rs[i].BytesPerToken; got != want {
				t.Errorf("%s cache: %d bytes per token, want %d", rs[i].DType, got, want)
			}
		}
	}
}

// bench --suite fork on a small shape: 8 continuations of a 300-token
// prompt in pages of 64 share the prompt's 4 full pages and copy the
// partly filled fifth once each (12 pages), where independent copies
// would hold 40; freed by the command.
func TestBenchFork(t *testing.T) {
	withDevice(t)
	saved := cacheSuite
	cacheSuite.H, cacheSuite.HKV, cacheSuite.D, cacheSuite.Page, cacheSuite.Prompt = 4, 2, 32, 64, 300
	defer func() { cacheSuite = saved }()
	out := cliOK(t, "bench", "--suite", "fork", "--reps", "3", "--quiet", "--json")
	rs := parseJSON[[]harness.ForkResult](t, out)
	if len(rs) != 4 {
		t.Fatalf("%d results, want 4 (f32, f16, q8_0, q4_0)", len(rs))
	}
	for _, r := range rs {
		if r.PagesInUse != 12 || r.PagesIndependent != 40 || !(r.StepsPerS > 0) || r.BytesInUse*40 != r.BytesIndependent*12 {
			t.Errorf("%+v: want 12 pages in use against 40, a rate", r)
		}
	}
}

// writeFile writes text to path, failing the test if it cannot.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bench --suite serve on a small schedule, on lavapipe's plan and as
// NVIDIA: both runs serve every request (the same tokens), the ragged run
// is one submission and one host wait a steady step, the call per
// sequence at least one a sequence.
func TestBenchServe(t *testing.T) {
	withDevice(t)
	saved := harness.DefaultServeSuite
	defer func() { harness.DefaultServeSuite = saved }()
	harness.DefaultServeSuite = harness.ServeSuite{Requests: 8, Rate: 200, PromptMin: 8, PromptMax: 40, OutputMin: 2, OutputMax: 6,
		Slots: 3, Budget: 24, Chunks: 2, H: 4, HKV: 2, D: 16, PageSize: 8, Pages: 12, DType: vkattn.Float16}
	for _, plan := range []string{"lavapipe", "nvidia"} {
		rs := parseJSON[[]harness.ServeResult](t, cliOK(t, "bench", "--suite", "serve", "--plan-as", plan, "--json", "--quiet"))
		if len(rs) != 2 || rs[0].Mode != "ragged" || rs[1].Mode != "per-sequence" {
			t.Fatalf("%s: results %+v", plan, rs)
		}
		for _, r := range rs {
			if r.Generated != rs[0].Generated || r.Prefilled != rs[0].Prefilled || r.Steps != rs[0].Steps || r.Steady == 0 || !(r.TokensPerS > 0) || r.TTFTP99NS < r.TTFTP50NS {
				t.Errorf("%s: %+v beside %+v", plan, r, rs[0])
			}
		}
		if r := rs[0]; r.Submits != 1 || r.Waits != 1 {
			t.Errorf("%s: a ragged step is %g submissions and %g waits, want 1 and 1", plan, r.Submits, r.Waits)
		}
		if r := rs[1]; r.Submits < 1 {
			t.Errorf("%s: %g submissions a step one call per sequence", plan, r.Submits)
		}
	}
}
