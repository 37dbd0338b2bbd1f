//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Issue 4: bench --reps 1000000000000 and tune --reps 1000000000000
// --dry-run died out of memory. Every numeric flag that sizes work is
// range-checked when parsed: a usage error naming the limit. In a child
// process, where an allocation the check missed cannot take the machine
// down.
func TestNumericFlagLimits(t *testing.T) {
	dir := t.TempDir()
	q, _, v := seed000(t, dir)
	w := save(t, dir, "w.npy", [][]float32{{1, 0, 0}})
	big := "1000000000000"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--reps", big}, "--reps 1000000000000: want at least 1 and at most 1000000"},
		{[]string{"bench", "--suite", "decode-loop", "--reps", big}, "--reps 1000000000000: want at least 1 and at most 1000000"},
		{[]string{"bench", "--reps", "0"}, "--reps 0: want at least 1"},
		{[]string{"tune", "--reps", big, "--dry-run"}, "--reps 1000000000000: want at least 1 and at most 1000000"},
		{[]string{"tune", "--len", big, "--dry-run"}, "--len 1000000000000: want at least 1 and at most 32768"},
		{[]string{"decode", "-q", q, "-k", q, "-v", v, "--page", big}, "--page 1000000000000: want a page size of at least 1 and at most 1048576"},
		// Q, K, V of one token: T = 1.
		{[]string{"decode", "-q", q, "-k", q, "-v", q, "--page", "2"}, "--page 2: want at most T (T = 1)"},
		{[]string{"verify", "--random", big}, "--random 1000000000000: want at least 0 and at most 1000000"},
		{[]string{"heatmap", "--weights", w, "-o", filepath.Join(dir, "h.png"), "--batch", "-1"}, "--batch -1: want a batch item >= 0"},
		{[]string{"heatmap", "--weights", w, "-o", filepath.Join(dir, "h.png"), "--heads", "0,-2"}, "--heads 0,-2: want heads >= 0"},
	} {
		errOut, code := runCLIProcess(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "goroutine") {
			t.Errorf("%v: exit %d, want %d saying %q; stderr:\n%.2000s", c.args, code, exitUsage, c.want, errOut)
		}
	}
}

// Issue 3: --tokens-k @/dev/zero grew without bound. A token file is read
// through a limit (16 MiB) that the error names; an endless device ends at
// the limit, a larger regular file fails before reading.
func TestTokenFileLimit(t *testing.T) {
	dir := t.TempDir()
	w := save(t, dir, "w.npy", [][]float32{{1, 0, 0}})
	large := filepath.Join(dir, "large.txt")
	if err := os.WriteFile(large, make([]byte, maxTokenFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"/dev/zero", large} {
		errOut, code := runCLIProcess(t, "heatmap", "--weights", w, "-o", filepath.Join(dir, "h.png"), "--tokens-k", "@"+file)
		want := "--tokens-k: " + file + " is larger than 16 MiB, the most a token file may hold"
		if code != exitFail || !strings.Contains(errOut, want) {
			t.Errorf("@%s: exit %d, want %d saying %q; stderr:\n%.2000s", file, code, exitFail, want, errOut)
		}
	}
	// Just under the limit is read.
	ok := filepath.Join(dir, "ok.txt")
	os.WriteFile(ok, []byte("a\nb\nc\n"), 0o644)
	if _, err := readTokens("@" + ok); err != nil {
		t.Errorf("a small token file: %v", err)
	}
	if got, err := readLimited(large, "token file", maxTokenFileBytes+1); err != nil || len(got) != maxTokenFileBytes+1 {
		t.Errorf("a file at the limit: %d bytes, %v", len(got), err)
	}
}

// verify reads each DIR/*.json whole: a FIFO (which would block the read),
// a link to /dev/zero or a file over 64 MiB is refused before reading.
func TestVerifyCaseFileLimit(t *testing.T) {
	for name, mk := range map[string]func(path string) (want string){
		"a FIFO": func(p string) string {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return p + " is a FIFO (named pipe); a case file must be a regular file"
		},
		"a link to /dev/zero": func(p string) string {
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
			return p + " is a device; a case file must be a regular file"
		},
		"too large": func(p string) string {
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(maxGoldenFileBytes + 1) // sparse: no disk used
			f.Close()
			return p + " is larger than 64 MiB, the most a case file may hold"
		},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			want := mk(filepath.Join(dir, "case.json"))
			errOut, code := runCLIProcess(t, "verify", "--dir", dir)
			if code != exitFail || !strings.Contains(errOut, want) {
				t.Errorf("exit %d, want %d saying %q; stderr:\n%.2000s", code, exitFail, want, errOut)
			}
		})
	}
}

func TestRangeError(t *testing.T) {
	if msg := rangeError("--reps", maxReps, 1, maxReps); msg != "" {
		t.Errorf("at the limit: %q", msg)
	}
	if msg := rangeError("--reps", maxReps+1, 1, maxReps); msg != "--reps "+strconv.Itoa(maxReps+1)+": want at least 1 and at most 1000000" {
		t.Errorf("over the limit: %q", msg)
	}
}

// Verify --seed without --random seeds nothing that
// runs: a usage error, before any case is read, where it was ignored.
// With --random it is taken (the missing directory fails after).
func TestVerifySeedNeedsRandom(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for _, args := range [][]string{{"--seed", "5"}, {"--seed", "5", "--random", "0"}} {
		checkRefused(t, append([]string{"verify", "--dir", none}, args...), exitUsage, "--seed seeds the random problems of --random N; give --random too", "")
	}
	checkRefused(t, []string{"verify", "--dir", none, "--seed", "5", "--random", "1"}, exitFail, none, "")
}
