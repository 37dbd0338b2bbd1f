package main

import (
	"fmt"
	"io"
	"os"
)

// Limits on what the command line may ask for. Each bounds memory or work
// that grows with the value (a timed call keeps two durations, a page
// size is allocated per batch item), far above any sensible use, so that
// a typo is a usage error instead of the process running out of memory.
const (
	maxReps        = 1_000_000 // bench and tune --reps
	maxTuneLen     = 32768     // tune --len: L=S of the prefill problem (bench's long suite reaches it)
	maxPage        = 1 << 20   // decode --page, besides at most T
	maxRandomCases = 1_000_000 // verify --random
)

// Limits on the user files read whole into memory (the .npy and weights
// readers bound what they read by the header instead).
const (
	maxTokenFileBytes  = 16 << 20 // heatmap --tokens-q/--tokens-k @FILE
	maxGoldenFileBytes = 64 << 20 // verify: each DIR/*.json case file
)

// rangeError is the usage error of a numeric flag outside lo..hi, or "".
func rangeError(flag string, v, lo, hi int) string {
	if v >= lo && v <= hi {
		return ""
	}
	return fmt.Sprintf("%s %d: want at least %d and at most %d", flag, v, lo, hi)
}

// checkRanges reports the first flag outside its range as a usage error
// and returns its exit status, or exitOK.
func checkRanges(stderr io.Writer, cmd string, checks ...string) int {
	for _, msg := range checks {
		if msg != "" {
			return usagef(stderr, cmd, "%s", msg)
		}
	}
	return exitOK
}

// bytesLimit says a byte count the way the limits above are chosen.
func bytesLimit(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// readLimited reads a whole user file of at most limit bytes; what names
// it in the error (e.g. "token file"). A larger file, or an endless one
// such as /dev/zero, fails after limit+1 bytes without growing further.
func readLimited(path, what string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooBig := fmt.Errorf("%s is larger than %s, the most a %s may hold", path, bytesLimit(limit), what)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, tooBig
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, tooBig
	}
	return data, nil
}
