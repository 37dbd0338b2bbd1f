// Sequences of different lengths: the KV cache and packed (varlen)
// batches (SEMANTICS.md §4.2).

package kv_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/reference"
)

// history is the host copy of a cache's contents: per sequence, per KV
// head, the rows appended so far (as the cache's type rounds them).
type history struct {
	dt          vkattn.DType
	hkv, dk, dv int
	k, v        [][][]float32 // [b][h] flat rows
}

func newHistory(b, hkv, dk, dv int, dt vkattn.DType) *history {
	h := &history{dt: dt, hkv: hkv, dk: dk, dv: dv, k: make([][][]float32, b), v: make([][][]float32, b)}
	for i := range h.k {
		h.k[i], h.v[i] = make([][]float32, hkv), make([][]float32, hkv)
	}
	return h
}

// add records n tokens of sequence b given as (HKV, n, d) data.
func (h *history) add(b int, k, v []float32, n int) {
	for j := 0; j < h.hkv; j++ {
		h.k[b][j] = append(h.k[b][j], devtest.RoundAll(h.dt, k[j*n*h.dk:(j+1)*n*h.dk])...)
		h.v[b][j] = append(h.v[b][j], devtest.RoundAll(h.dt, v[j*n*h.dv:(j+1)*n*h.dv])...)
	}
}

func (h *history) truncate(b, n int) {
	for j := range h.k[b] {
		h.k[b][j], h.v[b][j] = h.k[b][j][:n*h.dk], h.v[b][j][:n*h.dv]
	}
}

// want is full bottom-right causal attention of sequence b's last L
// queries q (H, L, dk) over its whole history: the reference on that one
// sequence alone, with opts' variants.
func (h *history) want(t *testing.T, b int, q []float32, H, L int, opts vkattn.Options) []float64 {
	t.Helper()
	return h.reference(t, b, q, H, L, opts).O
}

// reference is want's whole reference result (O and the LSE).
func (h *history) reference(t *testing.T, b int, q []float32, H, L int, opts vkattn.Options) *reference.Result {
	t.Helper()
	n := len(h.k[b][0]) / h.dk
	var k, v []float32
	for j := 0; j < h.hkv; j++ {
		k, v = append(k, h.k[b][j]...), append(v, h.v[b][j]...)
	}
	opts.Causal = vkattn.CausalBottomRight
	res, err := reference.Attention(q, [4]int{1, H, L, h.dk}, k, [4]int{1, h.hkv, n, h.dk}, v, [4]int{1, h.hkv, n, h.dv}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// filledCache makes a cache of cfg and appends lengths[b] random tokens
// to sequence b, recording them in a history.
func filledCache(t *testing.T, d *vkattn.Device, r *rand.Rand, cfg kv.Config, lengths ...int) (*kv.Cache, *history) {
	t.Helper()
	cache, err := kv.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	hist := newHistory(cfg.B, cfg.HKV, cfg.DK, cfg.DV, cfg.DType)
	for b, n := range lengths {
		k, v := devtest.RandomValues(r, cfg.HKV*n*cfg.DK), devtest.RandomValues(r, cfg.HKV*n*cfg.DV)
		if err := cache.AppendTo(b, k, v, n); err != nil {
			t.Fatal(err)
		}
		hist.add(b, k, v, n)
	}
	return cache, hist
}

// check compares o, the (B, H, L, dv) output of queries qData over the
// cache, with each sequence's attention over its history.
func (h *history) check(t *testing.T, what string, o, qData []float32, H, L int, opts vkattn.Options) {
	t.Helper()
	for b := range h.k {
		n := H * L * h.dv
		devtest.Compare(t, fmt.Sprintf("%s, sequence %d (length %d)", what, b, len(h.k[b][0])/h.dk), o[b*n:(b+1)*n], h.want(t, b, qData[b*len(qData)/len(h.k):(b+1)*len(qData)/len(h.k)], H, L, opts))
	}
}

// attendOnce runs one attention over the cache and returns O and the plan.
func attendOnce(t *testing.T, cache *kv.Cache, q *vkattn.Tensor, opts vkattn.Options) ([]float32, vkattn.Plan) {
	t.Helper()
	out, err := cache.Attention(q, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	o := devtest.Download(t, out.O)
	return o, out.Plan
}

// A decode loop through the cache equals attention over each sequence's
// whole history: ragged prefills, one token per step for every sequence,
// a rollback, in float32 and half caches, with the score variants too.
func TestKVCacheDecodeLoop(t *testing.T) {
	const B, H, HKV, D, capacity = 2, 4, 2, 8, 48
	for _, c := range []struct {
		name        string
		dt          vkattn.DType
		page, pages int // paged: pages of page positions, a pool of pages
		opts        vkattn.Options
	}{
		{"f32", vkattn.Float32, 0, 0, vkattn.Options{}},
		{"f16", vkattn.Float16, 0, 0, vkattn.Options{}},
		{"bf16 window alibi sinks", vkattn.BFloat16, 0, 0, vkattn.Options{
			Window: &vkattn.Window{Left: 6, Right: 0}, ALiBi: vkattn.ALiBiSlopes(H), Sinks: []float32{0.5, -1, 0, 1}}},
		// Pages of 5 positions: prefills and steps cross page boundaries,
		// and the rollback returns a page that the next steps reuse.
		{"paged f32", vkattn.Float32, 5, 0, vkattn.Options{}},
		{"paged f16 window", vkattn.Float16, 5, 9, vkattn.Options{Window: &vkattn.Window{Left: 4, Right: 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(51))
			// Prefills of different lengths, then a block of 3 queries.
			cache, hist := filledCache(t, devtest.Dev, r, kv.Config{B: B, HKV: HKV, Capacity: capacity, DK: D, DV: D, DType: c.dt, PageSize: c.page, Pages: c.pages}, 13, 5)
			qBlock := devtest.RandomValues(r, B*H*3*D)
			o, _ := attendOnce(t, cache, devtest.Upload(t, devtest.Dev, []int{B, H, 3, D}, qBlock), c.opts)
			hist.check(t, "prefill queries", o, qBlock, H, 3, c.opts)

			// Decode: one prepared call, replayed; each step appends a
			// token to both sequences and writes its query.
			q := devtest.Upload(t, devtest.Dev, []int{B, H, 1, D}, make([]float32, B*H*D))
			call, err := cache.Prepare(q, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer call.Close()
			var before vkattn.Stats
			for step := 0; step < 12; step++ {
				if step == 1 {
					// After a step has run: under discrete memory (a GPU
					// plan) the first append allocates its staging buffer,
					// which the next ones reuse.
					before = devtest.Dev.Stats()
				}
				k, v := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D)
				if err := cache.Append(k, v, 1); err != nil {
					t.Fatal(err)
				}
				for b := 0; b < B; b++ {
					hist.add(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
				}
				if step == 6 {
					// Roll back two tokens of sequence 0, then go on.
					lens := cache.Lengths()
					lens[0] -= 2
					if err := cache.Truncate(lens); err != nil {
						t.Fatal(err)
					}
					hist.truncate(0, lens[0])
				}
				qData := devtest.RandomValues(r, B*H*D)
				o := devtest.Replay(t, q, qData, call.Run, call.Output().O)
				hist.check(t, fmt.Sprintf("step %d", step), o, qData, H, 1, c.opts)
			}
			if s := devtest.Dev.Stats().Since(before); s.Allocations != 0 || s.Pools != 0 || s.Commands != 0 {
				t.Errorf("decode steps allocated: %+v before, %+v after", before, s)
			}
		})
	}
}

// A split-K decode over a long cache, contiguous and paged, on both load
// paths: the kernel reads only each sequence's positions, through the page
// table when paged.
func TestKVCacheSplitK(t *testing.T) {
	for path, d := range devtest.EveryPlan() {
		for _, page := range []int{0, 64} {
			t.Run(fmt.Sprintf("%s/page %d", path, page), func(t *testing.T) { kvCacheSplitK(t, d, page) })
		}
	}
}

func kvCacheSplitK(t *testing.T, d *vkattn.Device, page int) {
	const B, H, HKV, D, capacity = 2, 8, 2, 16, 600
	r := rand.New(rand.NewSource(53))
	cache, hist := filledCache(t, d, r, kv.Config{B: B, HKV: HKV, Capacity: capacity, DK: D, DV: D, DType: vkattn.Float16, PageSize: page}, 517, 290)
	qData := devtest.RandomValues(r, B*H*D)
	o, plan := attendOnce(t, cache, devtest.Upload(t, d, []int{B, H, 1, D}, qData), vkattn.Options{})
	if plan.Kernel.Splits == 0 {
		t.Fatalf("plan %v: want split-K", plan.Kernel)
	}
	hist.check(t, "split-K", o, qData, H, 1, vkattn.Options{})
}

// Appending past the capacity, truncating past a length, bad values and
// options the cache sets itself are refused with sentinels, and nothing is
// written.
func TestKVCacheRefusals(t *testing.T) {
	cache, err := kv.New(devtest.Dev, kv.Config{B: 2, HKV: 1, Capacity: 4, DK: 2, DV: 2, DType: vkattn.Float16})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if err := cache.Append(make([]float32, 2*3*2), make([]float32, 2*3*2), 3); err != nil {
		t.Fatal(err)
	}
	q := devtest.Upload(t, devtest.Dev, []int{2, 1, 1, 2}, []float32{1, 0, 0, 1})
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"past capacity", cache.Append(make([]float32, 2*2*2), make([]float32, 2*2*2), 2), vkattn.ErrCapacity},
		{"value too large for f16", cache.Append([]float32{1, 7e4, 0, 0}, make([]float32, 4), 1), vkattn.ErrOverflow},
		{"wrong count", cache.Append(make([]float32, 3), make([]float32, 4), 1), vkattn.ErrShape},
		{"truncate past the length", cache.Truncate([]int{4, 1}), vkattn.ErrCapacity},
		{"sequence out of range", cache.AppendTo(2, make([]float32, 2), make([]float32, 2), 1), vkattn.ErrShape},
		{"options the cache sets", func() error { _, err := cache.Attention(q, vkattn.Options{Causal: vkattn.CausalTopLeft}); return err }(), vkattn.ErrOption},
		{"bad window", func() error {
			_, err := cache.Attention(q, vkattn.Options{Window: &vkattn.Window{Left: -2}})
			return err
		}(), vkattn.ErrOption},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if got := cache.Lengths(); got[0] != 3 || got[1] != 3 {
		t.Errorf("lengths %v after the refusals, want [3 3]", got)
	}
	// A count no slice holds is named as given, not wrapped around.
	if err := cache.AppendTo(0, nil, nil, math.MaxInt); !errors.Is(err, vkattn.ErrShape) || strings.Contains(err.Error(), "want -") {
		t.Errorf("AppendTo of MaxInt tokens: %v, want ErrShape with the count it wants", err)
	}
	if _, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 0, DK: 2, DV: 2}); !errors.Is(err, vkattn.ErrEmpty) {
		t.Errorf("capacity 0: %v, want ErrEmpty", err)
	}
	// A paged cache whose pool runs out before the capacity does.
	paged, err := kv.New(devtest.Dev, kv.Config{B: 2, HKV: 1, Capacity: 8, DK: 2, DV: 2, PageSize: 2, Pages: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer paged.Close()
	if err := paged.AppendTo(0, make([]float32, 2*4), make([]float32, 2*4), 4); err != nil {
		t.Fatal(err)
	}
	if err := paged.AppendTo(1, make([]float32, 2*3), make([]float32, 2*3), 3); !errors.Is(err, vkattn.ErrCapacity) {
		t.Errorf("past the pool: %v, want ErrCapacity", err)
	}
	if err := paged.Truncate([]int{1, 0}); err != nil { // frees a page
		t.Fatal(err)
	}
	if err := paged.AppendTo(1, make([]float32, 2*3), make([]float32, 2*3), 3); err != nil {
		t.Errorf("after the rollback freed a page: %v", err)
	}
}

// Tokens appended from device tensors: copied on the device when they are
// dense and of the cache's type, through the host otherwise (a float32
// projection output into a float16 cache, a strided view).
func TestKVCacheAppendTensors(t *testing.T) {
	const B, H, HKV, D = 2, 4, 2, 8
	r := rand.New(rand.NewSource(57))
	for _, page := range []int{0, 3} {
		t.Run(fmt.Sprintf("page %d", page), func(t *testing.T) {
			cache, hist := filledCache(t, devtest.Dev, r, kv.Config{B: B, HKV: HKV, Capacity: 20, DK: D, DV: D, DType: vkattn.Float16, PageSize: page})
			for i, src := range []struct {
				dt   vkattn.DType
				blhd bool
			}{{vkattn.Float16, false}, {vkattn.Float32, false}, {vkattn.Float16, true}} {
				n := 2 + i
				k, v := devtest.RandomValues(r, B*HKV*n*D), devtest.RandomValues(r, B*HKV*n*D)
				s := [4]int{B, HKV, n, D}
				up := func(x []float32) *vkattn.Tensor {
					if src.blhd {
						return devtest.MustUploadAs(t, devtest.Dev, []int{B, n, HKV, D}, devtest.ToBLHD(x, s), src.dt).SwapAxes12()
					}
					return devtest.MustUploadAs(t, devtest.Dev, s[:], x, src.dt)
				}
				kt, vt := up(k), up(v)
				err := cache.AppendTensors(kt, vt)
				kt.Close()
				vt.Close()
				if err != nil {
					t.Fatal(err)
				}
				for b := 0; b < B; b++ {
					m := HKV * n * D
					hist.add(b, devtest.RoundAll(src.dt, k[b*m:(b+1)*m]), devtest.RoundAll(src.dt, v[b*m:(b+1)*m]), n)
				}
			}
			qData := devtest.RandomValues(r, B*H*D)
			o, _ := attendOnce(t, cache, devtest.Upload(t, devtest.Dev, []int{B, H, 1, D}, qData), vkattn.Options{})
			hist.check(t, "appended from tensors", o, qData, H, 1, vkattn.Options{})
		})
	}
}

// A step prepared on a cache that is closed afterwards fails with
// ErrClosed when run, and frees cleanly.
func TestKVCacheClosedUnderAPreparedStep(t *testing.T) {
	cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 4, DK: 4, DV: 4, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.Append(make([]float32, 4), make([]float32, 4), 1); err != nil {
		t.Fatal(err)
	}
	step, err := cache.Prepare(devtest.Upload(t, devtest.Dev, []int{1, 1, 1, 4}, make([]float32, 4)), vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer step.Close()
	decode, err := cache.PrepareStep(1, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer decode.Close()
	cache.Close()
	if _, err := step.Run(t.Context()); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("run after the cache's Close: %v, want ErrClosed", err)
	}
	if err := cache.Append(make([]float32, 4), make([]float32, 4), 1); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("append after Close: %v, want ErrClosed", err)
	}
	if _, err := decode.Plan(); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("a decode step's Plan after the cache's Close: %v, want ErrClosed", err)
	}
}

// Goroutines appending to their own sequences of one cache at once (the
// race detector runs this in make test): every sequence ends up with its
// own tokens in order.
func TestKVCacheConcurrentAppends(t *testing.T) {
	const B, H, HKV, D, steps = 4, 2, 1, 4, 12
	cache, err := kv.New(devtest.Dev, kv.Config{B: B, HKV: HKV, Capacity: steps, DK: D, DV: D, PageSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	hist := newHistory(B, HKV, D, D, vkattn.Float32)
	r := rand.New(rand.NewSource(59))
	tokens := make([][][2][]float32, B)
	for b := range tokens {
		for i := 0; i < steps; i++ {
			tokens[b] = append(tokens[b], [2][]float32{devtest.RandomValues(r, HKV*D), devtest.RandomValues(r, HKV*D)})
			hist.add(b, tokens[b][i][0], tokens[b][i][1], 1)
		}
	}
	errs := make(chan error, B)
	for b := 0; b < B; b++ {
		go func() {
			for _, tok := range tokens[b] {
				if err := cache.AppendTo(b, tok[0], tok[1], 1); err != nil {
					errs <- err
					return
				}
				_ = cache.Lengths()
			}
			errs <- nil
		}()
	}
	for b := 0; b < B; b++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	qData := devtest.RandomValues(r, B*H*D)
	o, _ := attendOnce(t, cache, devtest.Upload(t, devtest.Dev, []int{B, H, 1, D}, qData), vkattn.Options{})
	hist.check(t, "after concurrent appends", o, qData, H, 1, vkattn.Options{})
}
