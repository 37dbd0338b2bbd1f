// The rolling KV cache of windowed layers (SEMANTICS.md §4.4).

package kv_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// rollingModel is the host's account of a rolling cache: each sequence's
// first kept position, as SEMANTICS.md §4.4 says an append moves it.
type rollingModel struct {
	window, page int
	start        []int
}

// append moves sequence b's first kept position as an append to its
// length n does: past the pages below the first new token's window.
func (m *rollingModel) append(b, n int) {
	m.start[b] = max(m.start[b], max(0, n-m.window+1)/m.page*m.page)
}

// pages is how many pages sequences of lengths lens hold.
func (m *rollingModel) pages(lens []int) int {
	n := 0
	for b, l := range lens {
		n += (l+m.page-1)/m.page - m.start[b]/m.page
	}
	return n
}

// A rolling cache of W = 256 with RoPE, decoding 2,000 tokens one per
// step (a prepared decode step) in two sequences of different lengths,
// equals the float64 reference of each whole sequence with the window
// Window{Left: 255, Right: 0} and bottom-right causal, as a cache keeping
// every position computes it: at every step of the first 600 (ten pages
// let go by each sequence, the RoPE rows wrapped), then every tenth. A chunk of 8 tokens whose
// queries' windows start on both sides of a page boundary keeps the older
// page and attends exactly; a call prepared for it is refused once a step
// has let that page go. The pages in use are exactly those holding the
// kept positions (at most B * (W/page + 1) once decoding), steps allocate
// no device memory, and a rollback, a fork and a reset keep the results
// exact. On lavapipe's own plan and memory, and in 400 steps on the
// NVIDIA plan with discrete memory (appends and their RoPE rows staged).
func TestRollingKVCacheDecode(t *testing.T) {
	for _, c := range []struct {
		plan  string
		steps int
	}{{"auto", 2000}, {"nvidia", 400}} {
		t.Run(fmt.Sprintf("%s/%d steps", c.plan, c.steps), func(t *testing.T) { rollingDecode(t, devtest.EveryPlan()[c.plan], c.steps) })
	}
}

func rollingDecode(t *testing.T, d *vkattn.Device, steps int) {
	const B, H, HKV, D, W, page, chunk = 2, 4, 2, 16, 256, 32, 8
	r := rand.New(rand.NewSource(97))
	rope := &vkattn.RoPE{Theta: 10000, Dims: 12, Style: vkattn.RoPEInterleaved}
	cfg := kv.Config{B: B, HKV: HKV, DK: D, DV: D, DType: vkattn.Float16, PageSize: page, Window: W, RoPE: rope,
		Capacity: W + page - 2 + chunk} // room for the chunk
	cache, err := kv.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if got := cache.Config(); got.Capacity != 320 || got.Pages != B*10 {
		t.Fatalf("capacity %d, %d pages; want 320 and %d", got.Capacity, got.Pages, B*10)
	}
	model := &rollingModel{window: W, page: page, start: make([]int, B)}
	// The history holds keys rotated in float64 at their absolute
	// positions and rounded to float16, as the cache stores them; the
	// reference attends over it with queries rotated alike.
	hist := newHistory(B, HKV, D, D, cfg.DType)
	rotate := func(x []float32, heads, n, first int) []float32 {
		return devtest.RotatedFrom(x, heads, n, D, rope, first)
	}
	// record adds n tokens of every sequence ((B, HKV, n, D) k and v)
	// appended to lengths before.
	record := func(before []int, k, v []float32, n int) {
		for b := 0; b < B; b++ {
			at := b * HKV * n * D
			hist.add(b, rotate(k[at:at+HKV*n*D], HKV, n, before[b]), v[at:at+HKV*n*D], n)
			model.append(b, before[b])
		}
	}
	check := func(what string, o, q []float32, L int, window vkattn.Window) {
		t.Helper()
		var rq []float32
		for b, n := range cache.Lengths() {
			rq = append(rq, rotate(q[b*H*L*D:(b+1)*H*L*D], H, L, n-L)...)
		}
		hist.check(t, what, o, rq, H, L, vkattn.Options{Window: &window})
	}
	checkPages := func(what string, bound int) {
		t.Helper()
		lens := cache.Lengths()
		if got, want := cache.PagesInUse(), model.pages(lens); got != want || got > bound {
			t.Fatalf("%s: %d pages in use, want %d (the kept positions of %v from %v), at most %d", what, got, want, lens, model.start, bound)
		}
	}
	// Different starting lengths: the sequences let go of pages at
	// different steps.
	for b, n := range []int{40, 7} {
		k, v := devtest.RandomValues(r, HKV*n*D), devtest.RandomValues(r, HKV*n*D)
		if err := cache.AppendTo(b, k, v, n); err != nil {
			t.Fatal(err)
		}
		hist.add(b, rotate(k, HKV, n, 0), v, n)
	}
	window := vkattn.Window{Left: W - 1, Right: 0}
	step := devtest.PrepareStep(t, cache, H, vkattn.Options{Window: &window})
	defer step.Close()
	o := make([]float32, B*H*D)
	decodeBound := B * (W/page + 1)
	var stats vkattn.Stats
	var chunkCall *vkattn.Call
	var chunkQ *vkattn.Tensor
	chunked := false
	for i := 0; i < steps; i++ {
		before := cache.Lengths()
		// The chunk comes when the windows of its queries of sequence 0
		// start on both sides of a page boundary: the page before it
		// must stay, though the last query no longer sees it.
		if !chunked && i >= steps/2 && (before[0]-W+1)%page == page-3 {
			chunked = true
			k, v := devtest.RandomValues(r, B*HKV*chunk*D), devtest.RandomValues(r, B*HKV*chunk*D)
			if err := cache.Append(k, v, chunk); err != nil {
				t.Fatal(err)
			}
			record(before, k, v, chunk)
			if first := before[0] - W + 1; model.start[0] > first || first/page == (before[0]+chunk-W)/page {
				t.Fatalf("the chunk at length %d does not cross a page drop (kept from %d)", before[0], model.start[0])
			}
			checkPages("after the chunk", B*((W+page+chunk-2+page-1)/page))
			qData := devtest.RandomValues(r, B*H*chunk*D)
			chunkQ = devtest.Upload(t, d, []int{B, H, chunk, D}, qData)
			if chunkCall, err = cache.Prepare(chunkQ, vkattn.Options{Window: &window}); err != nil {
				t.Fatal(err)
			}
			defer chunkCall.Close()
			check(fmt.Sprintf("chunk of %d at step %d", chunk, i), devtest.Replay(t, chunkQ, qData, chunkCall.Run, chunkCall.Output().O), qData, chunk, window)
			continue
		}
		// Both views (256 and 320 positions) are prepared by step 250.
		if i == 300 {
			stats = d.Stats()
		}
		if i == 399 {
			if s := d.Stats().Since(stats); s.Allocations != 0 || s.Pools != 0 || s.Commands != 0 {
				t.Errorf("steps 300 to 398 allocated: %+v", s)
			}
		}
		k, v, q := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
		if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		record(before, k, v, 1)
		// Every step while the sequences start to roll (both let go of
		// ten pages and wrap the RoPE table's rows), then every tenth.
		if i < 600 || i%10 == 0 || i == steps-1 || chunkCall != nil {
			check(fmt.Sprintf("step %d", i), o, q, 1, window)
		}
		checkPages(fmt.Sprintf("step %d", i), decodeBound)
		if chunkCall != nil {
			// One step after the chunk: its first query's window reaches
			// a page the step let go.
			if _, err := chunkCall.Run(context.Background()); !errors.Is(err, vkattn.ErrOption) {
				t.Errorf("the chunk's call rerun after a step: %v, want ErrOption", err)
			}
			chunkCall = nil
		}
	}
	if !chunked {
		t.Fatal("no step took the chunk")
	}
	lens := cache.Lengths()
	if lens[0] != 40+steps-1+chunk || lens[1] != 7+steps-1+chunk {
		t.Fatalf("lengths %v after %d steps and a chunk", lens, steps-1)
	}
	t.Logf("lengths %v, kept from %v in %d pages of %d positions (a pool of %d)", lens, model.start, cache.PagesInUse(), page, cache.Config().Pages)

	// Rollback: to a length whose next token's window was let go is
	// refused; one token back is fine, and the next step is exact.
	tooShort := append([]int(nil), lens...)
	tooShort[0] = model.start[0] + W - 2
	if err := cache.Truncate(tooShort); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("Truncate(%v), kept from %v: %v, want ErrOption", tooShort, model.start, err)
	}
	lens[0]--
	if err := cache.Truncate(lens); err != nil {
		t.Fatal(err)
	}
	hist.truncate(0, lens[0])
	k, v, q := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
	if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
		t.Fatal(err)
	}
	record(lens, k, v, 1)
	check("step after a rollback", o, q, 1, window)
	checkPages("after a rollback", decodeBound)

	// Fork: sequence 1 becomes sequence 0, its pages shared; the last 8
	// tokens' queries (their table rows copied) see their windows.
	if err := cache.Fork(0, 1); err != nil {
		t.Fatal(err)
	}
	hist.fork(0, 1)
	model.start[1] = model.start[0]
	if got, want := cache.PagesInUse(), model.pages(cache.Lengths()[:1]); got != want {
		t.Errorf("after the fork %d pages in use, want sequence 0's %d", got, want)
	}
	narrow := vkattn.Window{Left: 200, Right: 0}
	qData := devtest.RandomValues(r, B*H*chunk*D)
	o8, _ := attendOnce(t, cache, devtest.Upload(t, d, []int{B, H, chunk, D}, qData), vkattn.Options{Window: &narrow})
	check("after a fork", o8, qData, chunk, narrow)

	// Reset: every page back, and a sequence starts again at position 0.
	if err := cache.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := cache.PagesInUse(); got != 0 {
		t.Errorf("after Reset %d pages in use", got)
	}
	hist = newHistory(B, HKV, D, D, cfg.DType)
	model.start = make([]int, B)
	k, v, q = devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
	if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
		t.Fatal(err)
	}
	record(make([]int, B), k, v, 1)
	check("first step after Reset", o, q, 1, window)
}

// A rolling cache refuses what would let a call see less than its window
// says: a configuration without pages or with too little capacity, a
// call without a window or with one wider than the cache's, masks, and
// a call whose first query's window reaches a page already let go (a
// narrower window over the same queries is taken).
func TestRollingKVCacheRefusals(t *testing.T) {
	const W, page, D = 8, 4, 8
	for _, c := range []struct {
		name string
		cfg  kv.Config
	}{
		{"no pages", kv.Config{B: 1, HKV: 1, DK: D, DV: D, Window: W}},
		{"capacity below the window", kv.Config{B: 1, HKV: 1, DK: D, DV: D, Window: W, PageSize: page, Capacity: W + page - 2}},
		{"negative window", kv.Config{B: 1, HKV: 1, DK: D, DV: D, Window: -1, PageSize: page, Capacity: 8}},
	} {
		if cache, err := kv.New(devtest.Dev, c.cfg); !errors.Is(err, vkattn.ErrOption) {
			cache.Close()
			t.Errorf("%s: %v, want ErrOption", c.name, err)
		}
	}
	if cache, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, DK: D, DV: D, Window: math.MaxInt32, PageSize: page}); !errors.Is(err, vkattn.ErrTooLarge) || !strings.Contains(err.Error(), "Window") {
		cache.Close()
		t.Errorf("a window whose pages pass 2^31 positions: %v, want ErrTooLarge naming the Window", err)
	}
	cache, err := kv.New(devtest.Dev, kv.Config{B: 2, HKV: 1, DK: D, DV: D, Window: W, PageSize: page})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if got := cache.Config().Capacity; got != W+page-1+1 { // 11, rounded up to pages
		t.Errorf("capacity %d, want %d", got, W+page)
	}
	// 20 tokens, one at a time: each sequence keeps positions 12..19.
	r := rand.New(rand.NewSource(101))
	for i := 0; i < 20; i++ {
		if err := cache.Append(devtest.RandomValues(r, 2*D), devtest.RandomValues(r, 2*D), 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := cache.PagesInUse(); got != 2*2 {
		t.Errorf("%d pages in use, want 4 (positions 12..19 of 2 sequences)", got)
	}
	if err := cache.Append(devtest.RandomValues(r, 2*W*D), devtest.RandomValues(r, 2*W*D), W); !errors.Is(err, vkattn.ErrCapacity) {
		t.Errorf("a chunk of %d tokens past the capacity: %v, want ErrCapacity", W, err)
	}
	prepare := func(L, left int, mask bool) error {
		q := devtest.Zeros(t, devtest.Dev, 2, 1, L, D)
		opts := vkattn.Options{}
		if left != -2 {
			opts.Window = &vkattn.Window{Left: left, Right: 0}
		}
		if mask {
			opts.BoolMasks = []vkattn.BoolMask{{Shape: vkattn.MaskShape{1, 1, 1, 1}, Values: []bool{true}, Meaning: vkattn.TrueAllows}}
		}
		call, err := cache.Prepare(q, opts)
		if err == nil {
			call.Close()
		}
		return err
	}
	for _, c := range []struct {
		name         string
		L, left      int
		mask, refuse bool
	}{
		{"no window", 1, -2, false, true},
		{"unbounded window", 1, -1, false, true},
		{"a window wider than the cache's", 1, W, false, true},
		{"a mask", 1, W - 1, true, true},
		{"8 queries, each seeing 1 key", 8, 0, false, false},
		// Query 0 of 8 at position 12 sees from position 5.
		{"8 queries with the cache's window", 8, W - 1, false, true},
		{"2 queries with the cache's window", 2, W - 1, false, true},
		{"the last query with the cache's window", 1, W - 1, false, false},
	} {
		err := prepare(c.L, c.left, c.mask)
		if c.refuse != errors.Is(err, vkattn.ErrOption) || (!c.refuse && err != nil) {
			t.Errorf("%s: %v, refused: want %v", c.name, err, c.refuse)
		}
	}
	if step, err := cache.PrepareStep(1, vkattn.Options{Window: &vkattn.Window{Left: W, Right: 0}}); !errors.Is(err, vkattn.ErrOption) {
		step.Close()
		t.Errorf("a decode step with a window wider than the cache's: %v, want ErrOption", err)
	}
	// Truncating to 18 needs positions 11.. for the next token: 12.. are
	// kept. To 19 needs 12..; to 0 empties.
	for _, c := range []struct {
		to   int
		want error
	}{{18, vkattn.ErrOption}, {21, vkattn.ErrCapacity}, {19, nil}, {0, nil}} {
		if err := cache.Truncate([]int{c.to, 20}); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("Truncate to %d: %v, want %v", c.to, err, c.want)
		}
	}
	// The window of a token at position 2 reaches back to position 0
	// (§4.4 clamps there), not to -5.
	if err := cache.Truncate([]int{0, 2}); !errors.Is(err, vkattn.ErrOption) || !strings.Contains(err.Error(), "reaches back to position 0,") {
		t.Errorf("Truncate to 2: %v, want ErrOption naming position 0", err)
	}
	if got := cache.Lengths(); got[0] != 0 || got[1] != 20 {
		t.Errorf("lengths %v after the truncations, want [0 20]", got)
	}
}
