package testutil

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// recorder is a testing.TB whose Fatalf stops only the goroutine of the
// check it records.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs check on a recorder and returns what it failed with ("" if
// it passed).
func failure(check func(testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.msg
}

// Near fails on NaN on either side, on unequal infinities and on
// different lengths, whatever the tolerance.
func TestNearFailsOnNaN(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		name string
		got  []float32
		want []float64
		tol  float64
		fail string
	}{
		{"within the tolerance", []float32{1.5, -2}, []float64{1.5000001, -2}, 1e-6, ""},
		{"equal infinities", []float32{float32(inf), float32(-inf)}, []float64{inf, -inf}, 0, ""},
		{"past the tolerance", []float32{1, 2.001}, []float64{1, 2}, 1e-6, "x[1] = 2.001, want 2 (tolerance 1e-06)"},
		{"a NaN value", []float32{float32(nan)}, []float64{0}, 1e30, "x[0] = NaN, want 0 (tolerance 1e+30)"},
		{"a NaN wanted", []float32{0}, []float64{nan}, inf, "x[0] = 0, want NaN (tolerance +Inf)"},
		{"both NaN", []float32{float32(nan)}, []float64{nan}, inf, "x[0] = NaN, want NaN (tolerance +Inf)"},
		{"unequal infinities", []float32{float32(inf)}, []float64{-inf}, inf, "x[0] = +Inf, want -Inf (tolerance +Inf)"},
		{"an infinity for a finite value", []float32{float32(inf)}, []float64{1}, 1e30, "x[0] = +Inf, want 1 (tolerance 1e+30)"},
		{"lengths", []float32{1}, []float64{1, 2}, 1, "x: 1 values, want 2"},
	} {
		got := failure(func(t testing.TB) { Near(t, "x", c.got, c.want, c.tol) })
		if got != c.fail {
			t.Errorf("%s: failed with %q, want %q", c.name, got, c.fail)
		}
		got64 := failure(func(t testing.TB) {
			g := make([]float64, len(c.got))
			for i, x := range c.got {
				g[i] = float64(x)
			}
			Near(t, "x", g, c.want, c.tol)
		})
		if (got64 == "") != (c.fail == "") {
			t.Errorf("%s, float64: failed with %q, want %q", c.name, got64, c.fail)
		}
	}
}

// Compare names the worst value against its bound, and fails on NaN and
// on different lengths.
func TestCompareNamesTheWorst(t *testing.T) {
	for _, c := range []struct {
		name       string
		got        []float32
		want       []float64
		tol, extra float64
		err        string
	}{
		{"within", []float32{1000.01, 0}, []float64{1000, 1e-5}, 2e-5, 0, ""},
		{"within with the allowance", []float32{0.5}, []float64{0.25}, 2e-5, 0.25, ""},
		{"the worst against its bound", []float32{1000.03, 0.5}, []float64{1000, 0.5 + 1e-5}, 2e-5, 0, "[0] = 1000.03, want 1000 (error 0.03, 1.5 times the bound 2e-05*max(1,|want|) + 0)"},
		{"NaN", []float32{float32(math.NaN())}, []float64{0}, 1, 1, "[0] = NaN, want 0 (error NaN, +Inf times the bound 1*max(1,|want|) + 1)"},
		{"lengths", []float32{0}, nil, 1, 0, "1 values, want 0"},
	} {
		err := Compare(c.got, c.want, c.tol, c.extra)
		if got := fmt.Sprint(err); (err == nil) != (c.err == "") || (err != nil && got != c.err) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
}

func TestKeyRange(t *testing.T) {
	// (B, H, S, d) = (1, 2, 3, 2): value 10*h + 2*s + i.
	x := []float32{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}
	got, s := KeyRange(x, [4]int{1, 2, 3, 2}, 1, 3)
	if want := []float32{2, 3, 4, 5, 12, 13, 14, 15}; !slices.Equal(got, want) || s != [4]int{1, 2, 2, 2} {
		t.Errorf("keys [1, 3): %v %v, want %v (1, 2, 2, 2)", got, s, want)
	}
}

func TestPermutations(t *testing.T) {
	for n, count := range []int{1, 1, 2, 6, 24, 120} {
		ps := Permutations(n)
		seen := map[string]bool{}
		for _, p := range ps {
			if sorted := slices.Sorted(slices.Values(p)); len(p) != n || (n > 0 && (sorted[0] != 0 || sorted[n-1] != n-1 || len(slices.Compact(sorted)) != n)) {
				t.Fatalf("n %d: %v is not an order of 0..%d", n, p, n-1)
			}
			seen[fmt.Sprint(p)] = true
		}
		if len(ps) != count || len(seen) != count {
			t.Errorf("n %d: %d orders, %d different, want %d", n, len(ps), len(seen), count)
		}
	}
}

func TestPermute(t *testing.T) {
	if got := Permute([]string{"a", "b", "c"}, []int{2, 0, 1}); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Errorf("order (2, 0, 1) of a b c: %v", got)
	}
}

// The archive has each member as name.npy, stored or deflated, its bytes
// unchanged.
func TestNPZMembers(t *testing.T) {
	members := map[string][]byte{"b": []byte("second"), "a": bytes.Repeat([]byte("first"), 100)}
	for _, deflate := range []bool{false, true} {
		p := WriteNPZ(t, filepath.Join(t.TempDir(), "x.npz"), members, deflate)
		zr, err := zip.OpenReader(p)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		var names []string
		for _, f := range zr.File {
			names = append(names, f.Name)
			if want := map[bool]uint16{false: zip.Store, true: zip.Deflate}[deflate]; f.Method != want {
				t.Errorf("deflate %v: %s has method %d, want %d", deflate, f.Name, f.Method, want)
			}
			r, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if name := f.Name[:len(f.Name)-len(".npy")]; !bytes.Equal(b, members[name]) {
				t.Errorf("deflate %v: %s holds %q", deflate, f.Name, b)
			}
		}
		if !slices.Equal(names, []string{"a.npy", "b.npy"}) {
			t.Errorf("deflate %v: members %v", deflate, names)
		}
	}
}

// Near returns the largest difference, 0 for equal values and infinities.
func TestNearReturnsTheLargestDifference(t *testing.T) {
	inf := math.Inf(1)
	if worst := Near(t, "x", []float32{1, 2.5, float32(inf)}, []float64{1.25, 2, inf}, 1); worst != 0.5 {
		t.Errorf("largest difference %v, want 0.5", worst)
	}
}
