package vulkanhost_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/reference"
)

// TestRaggedStepRecorded: a ragged step recorded into the host's command
// buffer appends each sequence's own number of tokens from the host's K
// and V buffers, attends with the host's packed queries and writes the
// packed outputs into the host's buffer, step after step (chunks, single
// tokens, idle sequences), each sequence's rows equal to the float64
// reference of that sequence alone; vkattn submits and allocates nothing
// after the first step of a shape, with the validation layer on and
// silent.
func TestRaggedStepRecorded(t *testing.T) {
	if !inFreshProcess(t) {
		return
	}
	h := newHost(t)
	cmds := h.newCommands(t)
	const B, H, HKV, D, most = 3, 4, 2, 8, 12
	d, err := vkattn.OpenOn(h.shared(), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := kv.New(d, kv.Config{B: B, HKV: HKV, Capacity: 32, DK: D, DV: D, PageSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: most, Chunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	// One buffer: K, V, Q and O of up to most tokens, packed.
	size := uint64(4 * (2*HKV + 2*H) * most * D)
	buf := h.newBuffer(t, size, vkattn.HostBufferUsage)
	r := rand.New(rand.NewPCG(5, 9))
	hist := [2][B][]float32{} // each sequence's K and V rows, head by head
	for i, counts := range [][]int{{3, 1, 0}, {1, 4, 2}, {1, 1, 1}, {3, 1, 0}} {
		total := counts[0] + counts[1] + counts[2]
		x := func(at, heads int) ([]float32, vkattn.BufferRegion) {
			off := uint64(4 * at * most * D)
			return buf.floats(off, heads*total*D), buf.region(off, []int{1, heads, total, D}, 8)
		}
		k, kr := x(0, HKV)
		v, vr := x(HKV, HKV)
		q, qr := x(2*HKV, H)
		o, or := x(2*HKV+H, H)
		for _, data := range [][]float32{k, v, q} {
			copy(data, random.Normal(r, len(data)))
		}
		var ts [4]*vkattn.Tensor
		for j, region := range []vkattn.BufferRegion{kr, vr, qr, or} {
			if ts[j], err = d.TensorOver(region); err != nil {
				t.Fatal(err)
			}
		}
		before := d.Stats()
		if err := step.Record(cmds.begin(t), counts, ts[0], ts[1], ts[2], ts[3]); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		cmds.submit(t)
		if s := d.Stats().Since(before); s.Submits != 0 || s.Waits != 0 || (i == 3 && s.Allocations != 0) {
			t.Errorf("step %d: vkattn made %d submissions, %d waits and %d allocations of its own", i, s.Submits, s.Waits, s.Allocations)
		}
		first := 0
		for b, n := range counts {
			rows := func(data []float32, heads int) []float32 { // sequence b's, head by head
				var out []float32
				for hd := range heads {
					at := (hd*total + first) * D
					out = append(out, data[at:at+n*D]...)
				}
				return out
			}
			if n > 0 {
				kb, vb := rows(k, HKV), rows(v, HKV)
				for j, add := range [2][]float32{kb, vb} {
					hist[j][b] = interleave(hist[j][b], add, HKV, D)
				}
				S := len(hist[0][b]) / (HKV * D)
				want, err := reference.Attention(rows(q, H), [4]int{1, H, n, D}, hist[0][b], [4]int{1, HKV, S, D}, hist[1][b], [4]int{1, HKV, S, D}, vkattn.Options{Causal: vkattn.CausalBottomRight})
				if err != nil {
					t.Fatal(err)
				}
				if c := verdict.Compare(rows(o, H), want.O, verdict.SweepTolerance); !c.OK() {
					t.Fatalf("%s: worst [%d] %.3g times the bound", fmt.Sprintf("step %d, sequence %d", i, b), c.Worst, c.Ratio)
				}
			}
			first += n
		}
		for _, x := range ts {
			x.Close()
		}
	}
	step.Close()
	cache.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// interleave appends add, heads heads of new rows of width w (head by
// head), to hist, heads heads of rows (head by head): each head's rows
// grow.
func interleave(hist, add []float32, heads, w int) []float32 {
	old, n := len(hist)/(heads*w), len(add)/(heads*w)
	out := make([]float32, 0, len(hist)+len(add))
	for h := range heads {
		out = append(out, hist[h*old*w:(h+1)*old*w]...)
		out = append(out, add[h*n*w:(h+1)*n*w]...)
	}
	return out
}
