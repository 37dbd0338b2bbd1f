package main

import (
	"runtime"
	"testing"
)

// dirOf, where an output's temporary file and backup go, takes every
// separator of the OS: on Windows "-o sub/O.npy" put them in the working
// folder and was not refused early when sub did not exist.
func TestDirOf(t *testing.T) {
	cases := map[string]string{"o.npy": ".", "sub/o.npy": "sub", "/o.npy": "/", "a/link/../o.npy": "a/link/.."}
	if runtime.GOOS == "windows" {
		cases = map[string]string{
			"o.npy": ".", "sub/o.npy": "sub", `sub\o.npy`: "sub", `a\b/o.npy`: `a\b`,
			`C:\o.npy`: `C:\`, "C:/o.npy": "C:/", "C:o.npy": "C:", `C:\a\o.npy`: `C:\a`,
			`\\host\share\o.npy`: `\\host\share\`, `\\host\share\a\o.npy`: `\\host\share\a`,
		}
	}
	for p, want := range cases {
		if got := dirOf(p); got != want {
			t.Errorf("dirOf(%q) = %q, want %q", p, got, want)
		}
	}
	for p, want := range map[string]string{"sub/o.npy": "sub/.x", "o.npy": "./.x"} {
		if runtime.GOOS == "windows" {
			want = map[string]string{"sub/o.npy": `sub\.x`, "o.npy": `.\.x`}[p]
		}
		if got := beside(p, ".x"); got != want {
			t.Errorf("beside(%q, .x) = %q, want %q", p, got, want)
		}
	}
}
