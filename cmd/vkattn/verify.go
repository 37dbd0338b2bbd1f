package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/filekind"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/verify"
)

const verifyUsage = `Usage: vkattn verify [--dir testdata] [--device N] [--plan-as VENDOR] [--run NAME] [--random N [--seed S]]

Runs every golden case in DIR/*.json (the worked examples of SEMANTICS.md §18 and
variants derived from them by hand; see testdata/README.md) on the device and
compares the GPU output, and the weights and log-sum-exp where a case has
them, with
  * the case's expected values: max |GPU - expected| <= the case's tolerance
    (1e-5 unless the case says otherwise, e.g. 1e-4 for values given to 4 digits);
  * the float64 reference: |GPU - reference| <= 1e-5 * max(1, |reference|).
--random N then runs N random problems (seeded by --seed, which needs
--random): odd shapes, d_k != d_v up to 256, grouped-query heads, decode
shapes (split-K), causal masks of both alignments, additive and boolean
masks, per-item key and query lengths, float16 and bfloat16 inputs, LSE
and weights, each against the float64 reference on the values as stored
(as run --check compares), so a device's own plans are checked beyond the
golden shapes.
It prints one line per case and, last, exactly "N passed, M failed"; the
exit status is 1 if any case failed. A case file must be a regular file
of at most 64 MiB; --random is at most 1000000.

Example:
  vkattn verify
  vkattn verify --dir ../vkattn/testdata --device llvmpipe --run seed003
  vkattn verify --random 200 --plan-as nvidia
`

func runVerify(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", stderr)
	dir := fs.String("dir", "testdata", "`directory` holding the golden *.json cases")
	var device deviceChoice
	deviceFlag(fs, &device)
	only := fs.String("run", "", "run only cases whose name contains `NAME`")
	random := fs.Int("random", 0, "also run `N` random problems against the float64 reference")
	seed := fs.Uint64("seed", 1, "the random problems' `seed`")
	if ok, code := parseFlags(fs, verifyUsage, args, stdout, stderr); !ok {
		return code
	}
	if code := checkRanges(stderr, "verify", rangeError("--random", *random, 0, maxRandomCases)); code != exitOK {
		return code
	}
	seedSet := false
	fs.Visit(func(fl *flag.Flag) { seedSet = seedSet || fl.Name == "seed" })
	if seedSet && *random == 0 {
		// Said so, not ignored: a seed alone changes nothing that runs.
		return usagef(stderr, "verify", "--seed seeds the random problems of --random N; give --random too")
	}
	if err := checkCaseFiles(*dir); err != nil {
		return failf(stderr, "verify", "%v", err)
	}
	cases, err := golden.Load(*dir)
	if err != nil {
		return failf(stderr, "verify", "%v (give the golden case directory with --dir)", err)
	}
	if *only != "" {
		var kept []golden.Case
		for _, c := range cases {
			if strings.Contains(c.Name, *only) {
				kept = append(kept, c)
			}
		}
		if len(kept) == 0 {
			return failf(stderr, "verify", "no case name contains %q", *only)
		}
		cases = kept
	}
	dev, err := vkattn.Open(device.with(vkattn.Config{}))
	if err != nil {
		return failf(stderr, "verify", "%v", err)
	}
	defer dev.Close()
	width := 0
	for _, c := range cases {
		width = max(width, len(c.Name))
	}
	var count tally
	for i := range cases {
		c := &cases[i]
		line, ok := verify.Case(dev, c)
		fmt.Fprintf(stdout, "%-*s  %s  %s\n", width, c.Name, line, count.add(ok))
	}
	rng := rand.New(rand.NewPCG(*seed, 0x72616e64)) // "rand"
	for i := 0; i < *random; i++ {
		p, types, name, err := verify.RandomCase(rng, i)
		line, ok := "", false
		if err == nil {
			line, ok = verify.Random(dev, p, types)
		} else {
			line = err.Error()
		}
		fmt.Fprintf(stdout, "%s: %s  %s\n", name, line, count.add(ok))
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", count.passed, count.failed)
	if count.failed > 0 {
		return exitFail
	}
	return exitOK
}

// checkCaseFiles checks, before golden.Load reads them whole, that the
// case files in dir are regular files of at most maxGoldenFileBytes: a
// FIFO would block the read and /dev/zero behind a link never end it.
func checkCaseFiles(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range files {
		st, err := os.Stat(f)
		switch {
		case err != nil:
			return err
		case !st.Mode().IsRegular():
			return fmt.Errorf("%s is %s; a case file must be a regular file", f, filekind.Describe(st.Mode()))
		case st.Size() > maxGoldenFileBytes:
			return fmt.Errorf("%s is larger than %s, the most a case file may hold", f, bytesLimit(maxGoldenFileBytes))
		}
	}
	return nil
}

// tally counts verify's verdicts.
type tally struct{ passed, failed int }

// add counts one case and returns its verdict.
func (t *tally) add(ok bool) string {
	if ok {
		t.passed++
		return "PASS"
	}
	t.failed++
	return "FAIL"
}
