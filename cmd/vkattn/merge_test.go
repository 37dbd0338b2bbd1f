package main

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/reference"
)

// saveNPZ writes the arrays as the members of an .npz file.
func saveNPZ(t *testing.T, path string, members ...output) string {
	t.Helper()
	p, err := stageArraysNPZ(path, members)
	if err != nil {
		t.Fatal(err)
	}
	if err := commitAll([]*pendingFile{p}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMergeCommand: 'vkattn run' over a prefix of the keys (not causal)
// and over the rest (bottom-right causal), then 'vkattn merge' of the two
// parts, given as .npy pairs and as .npz files with an empty part among
// them, writes the bottom-right causal attention over all the keys, as
// the float64 reference computes it.
func TestMergeCommand(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	const H, L, P, N, D = 2, 3, 5, 4, 4
	rows := normals(21, 37)
	q, k, v := rows(H*L*D, 1), rows(H*(P+N)*D, 1), rows(H*(P+N)*D, 1)
	split := func(x []float32, from, to int) []float32 {
		var out []float32
		for h := range H {
			out = append(out, x[(h*(P+N)+from)*D:(h*(P+N)+to)*D]...)
		}
		return out
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	qPath := writeArray(t, dir, "q.npy", []int{H, L, D}, q)
	for i, c := range []struct {
		from, to int
		causal   string
	}{{0, P, "none"}, {P, P + N, "bottom-right"}} {
		n := c.to - c.from
		kp := writeArray(t, dir, "k"+string(rune('1'+i))+".npy", []int{H, n, D}, split(k, c.from, c.to))
		vp := writeArray(t, dir, "v"+string(rune('1'+i))+".npy", []int{H, n, D}, split(v, c.from, c.to))
		cliOK(t, "run", "-q", qPath, "-k", kp, "-v", vp, "--causal", c.causal,
			"-o", path("o"+string(rune('1'+i))+".npy"), "--lse", path("lse"+string(rune('1'+i))+".npy"))
	}
	want, err := reference.Attention(q, [4]int{1, H, L, D}, k, [4]int{1, H, P + N, D}, v, [4]int{1, H, P + N, D},
		vkattn.Options{Causal: vkattn.CausalBottomRight})
	if err != nil {
		t.Fatal(err)
	}

	out := cliOK(t, "merge", "-o", path("o.npy"), path("o1.npy")+","+path("lse1.npy"), "--lse", path("lse.npy"),
		path("o2.npy")+","+path("lse2.npy"), "--check")
	if !strings.Contains(out, "merged 2 parts") || !strings.Contains(out, "check vs float64 reference") || !strings.Contains(out, ": ok") {
		t.Errorf("merge output:\n%s", out)
	}
	o, lse := load(t, path("o.npy")), load(t, path("lse.npy"))
	if got := shapeString(o.Shape) + " " + shapeString(lse.Shape); got != shapeString([]int{H, L, D})+" "+shapeString([]int{H, L}) {
		t.Errorf("shapes %s", got)
	}
	testutil.Near(t, "O", o.F32, want.O, verdict.SweepTolerance)
	testutil.Near(t, "LSE", lse.F32, want.LSE, verdict.SweepTolerance)

	// The same parts as .npz files, with an empty part: LSE -Inf, O 0,
	// its LSE given as (H, L, 1).
	npz := func(name string, i int) string {
		return saveNPZ(t, path(name), output{"o", "", []int{H, L, D}, load(t, path("o"+string(rune('1'+i))+".npy")).F32},
			output{"lse", "", []int{H, L}, load(t, path("lse"+string(rune('1'+i))+".npy")).F32})
	}
	none := make([]float32, H*L)
	for i := range none {
		none[i] = float32(math.Inf(-1))
	}
	empty := saveNPZ(t, path("empty.npz"), output{"o", "", []int{H, L, D}, make([]float32, H*L*D)}, output{"lse", "", []int{H, L, 1}, none})
	cliOK(t, "merge", npz("part2.npz", 1), empty, npz("part1.npz", 0), "-o", path("o_npz.npy"))
	testutil.Near(t, "O from .npz parts", load(t, path("o_npz.npy")).F32, want.O, verdict.SweepTolerance)

	// Without -o: the first values on stdout.
	if out := cliOK(t, "merge", empty); !strings.Contains(out, "O: [0 0 0 0") {
		t.Errorf("merge of an empty part:\n%s", out)
	}
}

// TestMergeCommandRefusals: no parts, parts of other shapes, a .npz
// without lse, an LSE that does not fit O and NaN in O are refused, and
// nothing is written.
func TestMergeCommandRefusals(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	o := path("o.npy")
	part := func(name string, oShape, lseShape []int, nan bool) string {
		n, m := 1, 1
		for _, s := range oShape {
			n *= s
		}
		for _, s := range lseShape {
			m *= s
		}
		x := make([]float32, n)
		for i := range x {
			x[i] = rand.Float32()
		}
		if nan {
			x[0] = float32(math.NaN())
		}
		return saveNPZ(t, path(name), output{"o", "", oShape, x}, output{"lse", "", lseShape, make([]float32, m)})
	}
	a := part("a.npz", []int{2, 3, 4}, []int{2, 3}, false)
	checkRefused(t, []string{"merge", "-o", o}, exitUsage, "no parts given", o)
	checkRefused(t, []string{"merge", "-o", o, a, part("b.npz", []int{2, 4, 4}, []int{2, 4}, false)}, exitFail, "share their shapes", o)
	checkRefused(t, []string{"merge", "-o", o, a, part("c.npz", []int{2, 3, 4}, []int{3, 2}, false)}, exitFail, "want (2, 3)", o)
	checkRefused(t, []string{"merge", "-o", o, a, part("d.npz", []int{2, 3, 4}, []int{2, 3}, true)}, exitFail, "NaN", o)
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		lse := make([]float32, 6)
		lse[4] = bad
		badLSE := saveNPZ(t, path("f.npz"), output{"o", "", []int{2, 3, 4}, make([]float32, 24)}, output{"lse", "", []int{2, 3}, lse})
		checkRefused(t, []string{"merge", "-o", o, "--lse", path("ml.npy"), a, badLSE}, exitFail, "LSE value 4 is", o)
	}
	noLSE := saveNPZ(t, path("e.npz"), output{"o", "", []int{2, 3, 4}, make([]float32, 24)})
	checkRefused(t, []string{"merge", "-o", o, a, noLSE}, exitFail, "lse", o)
	if out, _, code := cli(t, "merge", "-h"); code != exitOK || !strings.Contains(out, "Example") || !strings.Contains(out, "Flags:") {
		t.Errorf("merge -h: exit %d\n%s", code, out)
	}
}
