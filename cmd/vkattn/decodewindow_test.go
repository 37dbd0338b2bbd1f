package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/internal/testutil"
)

// decode --window-cache W decodes through a rolling cache that keeps the
// last W positions in pages: with --window 5,0 over 23 tokens in pages of
// 3 it lets go of pages as it goes, passes --check, and gives the O of
// the same decode through a cache that keeps every position. Without
// --page, or with a window reaching past W, it is a usage error.
func TestDecodeWindowCache(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	const T = decodeTokens
	q, k, v := decodeFiles(t, dir, 11)
	args := []string{"decode", "-q", q, "-k", k, "-v", v, "--prefill", "1", "--page", "3", "--window", "5,0", "--check", "--json"}
	rolling := filepath.Join(dir, "rolling.npy")
	s := parseJSON[decodeSummary](t, cliOK(t, append(args, "-o", rolling, "--window-cache", "6")...))
	if s.Check == nil || !s.Check.Pass || s.Steps+s.Prefill != T || !strings.Contains(s.Cache, "rolling (the last 6 positions in pages of 3)") {
		t.Errorf("summary %+v", s)
	}
	full := filepath.Join(dir, "full.npy")
	cliOK(t, append(args, "-o", full)...)
	testutil.Near(t, "O through a rolling cache against one keeping every position", load(t, rolling).F32, load(t, full).F32, 1e-6)

	base := []string{"decode", "-q", q, "-k", k, "-v", v}
	checkRefused(t, append(base, "--window-cache", "6", "--window", "5,0"), 2, "--window-cache 6 lets go of whole pages: give --page N too", "")
	checkRefused(t, append(base, "--window-cache", "6", "--page", "3", "--window", "6,0"), 2, "give --window L,R with 0 <= L <= 5", "")
	checkRefused(t, append(base, "--window-cache", "6", "--page", "3"), 2, "give --window L,R with 0 <= L <= 5", "")
	checkRefused(t, append(base, "--window-cache", "-1"), 2, "--window-cache -1", "")
}
