//go:build !fuzzing

package weights

// A cross-check against another implementation, npyio's npz writer. The
// fuzzing build (make test's fuzz runs, -tags fuzzing) leaves it out: that
// build instruments every package its test binary links, and npyio with
// its dependencies would be most of them.

import (
	"path/filepath"
	"reflect"
	"testing"

	"codeberg.org/sbinet/npyio/npz"
)

// Files written by npyio's own npz writer read back.
func TestLoadNPZFromNpyio(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.npz")
	if err := npz.Write(p, map[string]any{"m.npy": [][]float32{{1, 2, 3}, {4, 5, 6}}, "v.npy": []float64{1.5, 2.5}}); err != nil {
		t.Fatal(err)
	}
	ts := mustLoad(t, p)
	if m := ts["m"]; !reflect.DeepEqual(m.Shape, []int{2, 3}) || !reflect.DeepEqual(m.Data, []float32{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("m = %+v", m)
	}
	if v := ts["v"]; v.DType != "F64" || !reflect.DeepEqual(v.Data, []float32{1.5, 2.5}) {
		t.Fatalf("v = %+v", v)
	}
}
