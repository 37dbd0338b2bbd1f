package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/vkattn/vkattn/internal/harness"
)

// printForkTable writes the fork results as a table.
func printForkTable(w io.Writer, device string, rs []harness.ForkResult) {
	fmt.Fprintf(w, "device: %s\n%d continuations of a %d-token prompt (H=%d H_kv=%d d=%d, pages of %d), forked, then decode steps of all of them\n",
		device, cacheSuite.Sequences, cacheSuite.Prompt, cacheSuite.H, cacheSuite.HKV, cacheSuite.D, cacheSuite.Page)
	rows := [][]string{{"dtype", "steps", "pages", "independent", "cache MB", "independent MB", "step", "steps/s"}}
	for _, r := range rs {
		rows = append(rows, []string{r.DType, strconv.Itoa(r.Steps), strconv.Itoa(r.PagesInUse), strconv.Itoa(r.PagesIndependent),
			strconv.FormatFloat(float64(r.BytesInUse)/1e6, 'f', 1, 64), strconv.FormatFloat(float64(r.BytesIndependent)/1e6, 'f', 1, 64),
			durString(time.Duration(r.StepNS)), rate(r.StepsPerS)})
	}
	printAligned(w, rows, map[int]bool{0: true})
}

// runForkSuite is bench --suite fork.
func runForkSuite(f *benchFlags, stdout, stderr io.Writer) int {
	s := cacheSuite
	s.RoPE = f.rope
	return runCacheSuite(f, stdout, stderr, "fork", len(s.Types), len(s.Types)*f.reps, s.Fork, printForkTable)
}

// printCascadeTable writes the cascade results as a table.
func printCascadeTable(w io.Writer, device string, rs []harness.CascadeResult) {
	fmt.Fprintf(w, "device: %s\n", device)
	rows := [][]string{{"sequences", "rows", "prefix", "suffix", "H", "H_kv", "d", "cascade", "merge", "full", "speedup"}}
	for _, r := range rs {
		rows = append(rows, []string{strconv.Itoa(r.Sequences), strconv.Itoa(r.Rows), strconv.Itoa(r.Prefix), strconv.Itoa(r.Suffix),
			strconv.Itoa(r.H), strconv.Itoa(r.HKV), strconv.Itoa(r.D), durString(time.Duration(r.CascadeNS)), durString(time.Duration(r.MergeNS)),
			durString(time.Duration(r.FullNS)), strconv.FormatFloat(r.Speedup, 'f', 2, 64) + "x"})
	}
	printAligned(w, rows, nil)
}

// printServeTable writes the serving results as a table.
func printServeTable(w io.Writer, device string, rs []harness.ServeResult) {
	fmt.Fprintf(w, "device: %s\n%v\n", device, harness.DefaultServeSuite)
	rows := [][]string{{"mode", "steps", "tokens", "tokens/s", "step p50", "step p99", "TTFT p50", "TTFT p99", "steady steps", "submits/step", "waits/step", "staged KB/step", "allocations"}}
	for _, r := range rs {
		rows = append(rows, []string{r.Mode, strconv.Itoa(r.Steps), strconv.Itoa(r.Generated), rate(r.TokensPerS),
			durString(time.Duration(r.StepP50NS)), durString(time.Duration(r.StepP99NS)), durString(time.Duration(r.TTFTP50NS)), durString(time.Duration(r.TTFTP99NS)),
			strconv.Itoa(r.Steady), strconv.FormatFloat(r.Submits, 'f', 1, 64), strconv.FormatFloat(r.Waits, 'f', 1, 64), strconv.FormatFloat(r.Staged/1e3, 'f', 1, 64), strconv.Itoa(r.Allocs)})
	}
	printAligned(w, rows, map[int]bool{0: true})
}
