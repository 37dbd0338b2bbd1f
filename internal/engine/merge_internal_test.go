package engine

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/reference"
)

// TestMergeOfCallsNotYetRun: a merge is prepared over the LSE outputs of
// calls that have not run, whose buffers still hold whatever the memory
// held (NaN bits here), as a cascade prepares its calls and their merge
// before running any. PrepareMerge takes them without reading them, and
// once the calls and the merge run, the merge is the attention over both
// parts' keys.
func TestMergeOfCallsNotYetRun(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const L, S, D = 3, 5, 4
	vals := func(n int, seed float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Sin(seed + 1.7*float64(i)))
		}
		return x
	}
	q, k, v := vals(L*D, 0.3), vals(2*S*D, 1.1), vals(2*S*D, 2.9)
	upload := func(shape []int, x []float32) *Tensor {
		tn, err := d.Upload(shape, x)
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
	qt := upload([]int{1, 1, L, D}, q)
	var calls []*Call
	var parts []Part
	for i := 0; i < 2; i++ {
		kt, vt := upload([]int{1, 1, S, D}, k[i*S*D:(i+1)*S*D]), upload([]int{1, 1, S, D}, v[i*S*D:(i+1)*S*D])
		c, err := d.Prepare(qt, kt, vt, core.Options{WantLSE: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		lse := c.Output().LSE
		nan := make([]byte, 4*L)
		for r := 0; r < L; r++ {
			binary.LittleEndian.PutUint32(nan[4*r:], 0x7fc00000)
		}
		if err := lse.writeRaw(lse.offset, nan); err != nil {
			t.Fatal(err)
		}
		calls, parts = append(calls, c), append(parts, c.Output().Part())
	}
	m, err := d.PrepareMerge(parts)
	if err != nil {
		t.Fatalf("PrepareMerge over calls not yet run: %v", err)
	}
	defer m.Close()
	for _, c := range append(calls, m) {
		if _, err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got, err := m.Output().O.Download()
	if err != nil {
		t.Fatal(err)
	}
	want, err := reference.Attention(q, [4]int{1, 1, L, D}, k, [4]int{1, 1, 2 * S, D}, v, [4]int{1, 1, 2 * S, D}, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range got {
		if math.Abs(float64(x)-want.O[i]) > 1e-5 {
			t.Fatalf("merged O[%d] = %v, want %v", i, x, want.O[i])
		}
	}
}
