// Package testutil holds the checks and fixtures that tests of several
// packages share. Only tests import it.
package testutil

import (
	"archive/zip"
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/vkattn/vkattn/internal/verdict"
)

// Near fails t unless got has want's length and every value is within
// tol of want's: verdict.Near, so |got - want| <= tol, or both the same
// infinity. A NaN on either side is never near, whatever tol: a test that
// checks with Near fails on NaN. tol 0 asks for equal values. It returns
// the largest |got - want| (0 for equal infinities), for a test to report.
func Near[G, W float32 | float64](t testing.TB, what string, got []G, want []W, tol float64) (worst float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if !verdict.Near(g, w, tol) {
			t.Fatalf("%s[%d] = %v, want %v (tolerance %g)", what, i, got[i], want[i], tol)
		}
		if g != w {
			worst = max(worst, math.Abs(g-w))
		}
	}
	return worst
}

// Compare is verdict.CompareWithin(got, want, tol, extra) as an error
// naming the worst value, nil when every value is within its bound (NaN
// never is). It returns an error rather than failing a test so that
// goroutines other than the test's can use it.
func Compare(got []float32, want []float64, tol, extra float64) error {
	c := verdict.CompareWithin(got, want, tol, extra)
	switch {
	case c.Got != c.Want:
		return fmt.Errorf("%d values, want %d", c.Got, c.Want)
	case !c.OK():
		i := c.Worst
		return fmt.Errorf("[%d] = %v, want %v (error %.3g, %.3g times the bound %g*max(1,|want|) + %.3g)",
			i, got[i], want[i], math.Abs(float64(got[i])-want[i]), c.Ratio, tol, extra)
	}
	return nil
}

// KeyRange is keys [from, to) of x, dense (B, H, S, d), and its shape.
func KeyRange(x []float32, s [4]int, from, to int) ([]float32, [4]int) {
	out := make([]float32, 0, s[0]*s[1]*(to-from)*s[3])
	for bh := 0; bh < s[0]*s[1]; bh++ {
		out = append(out, x[(bh*s[2]+from)*s[3]:(bh*s[2]+to)*s[3]]...)
	}
	return out, [4]int{s[0], s[1], to - from, s[3]}
}

// Permutations lists every order of 0..n-1.
func Permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range Permutations(n - 1) {
		for at := 0; at <= len(p); at++ {
			out = append(out, slices.Insert(slices.Clone(p), at, n-1))
		}
	}
	return out
}

// Permute is xs in the given order: xs[order[0]], xs[order[1]], ...
func Permute[T any](xs []T, order []int) []T {
	out := make([]T, len(order))
	for i, j := range order {
		out[i] = xs[j]
	}
	return out
}

// AddNPY adds members (name -> the bytes of a .npy file) to zw as the
// members "name.npy" of a .npz, in name order, stored as they are or
// deflated.
func AddNPY(zw *zip.Writer, members map[string][]byte, deflate bool) error {
	method := zip.Store
	if deflate {
		method = zip.Deflate
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: method})
		if err != nil {
			return err
		}
		if _, err := w.Write(members[name]); err != nil {
			return err
		}
	}
	return nil
}

// NPZ is a .npz archive of members (AddNPY). Writing to memory cannot
// fail; a failure is a bug, so it panics (fuzz seeds have no t).
func NPZ(members map[string][]byte, deflate bool) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	if err := AddNPY(zw, members, deflate); err != nil {
		panic(err)
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// WriteNPZ writes members as the .npz file path (NPZ) and returns path.
func WriteNPZ(t testing.TB, path string, members map[string][]byte, deflate bool) string {
	t.Helper()
	if err := os.WriteFile(path, NPZ(members, deflate), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
