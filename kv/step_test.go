package kv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// A decode step appends a token, attends and returns O in one submission
// and one host wait, whatever B and HKV, with no allocation once its view
// of the cache is prepared: on lavapipe's own plan and memory and on the
// NVIDIA plan with discrete memory (every host transfer staged), contiguous
// and paged, half caches, ragged lengths that cross views (256 -> 512 ->
// the capacity), with a window, and each step's O equals each sequence's
// attention over its whole history.
func TestDecodeStep(t *testing.T) {
	for _, plan := range devtest.OwnAndNVIDIA {
		for _, page := range []int{0, 32} {
			t.Run(fmt.Sprintf("%s/page %d", plan, page), func(t *testing.T) { decodeSteps(t, devtest.EveryPlan()[plan], page) })
		}
	}
}

func decodeSteps(t *testing.T, d *vkattn.Device, page int) {
	const B, H, HKV, D, capacity = 2, 4, 2, 16, 600
	r := rand.New(rand.NewSource(71))
	cfg := kv.Config{B: B, HKV: HKV, Capacity: capacity, DK: D, DV: D, DType: vkattn.Float16, PageSize: page}
	cache, hist := filledCache(t, d, r, cfg, 250, 90)
	opts := vkattn.Options{Window: &vkattn.Window{Left: 200, Right: 0}}
	step := devtest.PrepareStep(t, cache, H, opts)
	defer step.Close()
	o := make([]float32, B*H*D)
	run := func(i int) vkattn.Stats {
		k, v, q := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
		before := d.Stats()
		if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		after := d.Stats()
		for b := 0; b < B; b++ {
			hist.add(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
		}
		hist.check(t, fmt.Sprintf("step %d", i), o, q, H, 1, opts)
		return after.Since(before)
	}
	perStep := func(i int, s vkattn.Stats, fresh bool) {
		if s.Submits != 1 || s.Waits != 1 {
			t.Errorf("step %d: %d submissions, %d host waits; want 1 and 1", i, s.Submits, s.Waits)
		}
		if !fresh && (s.Allocations != 0 || s.Pools != 0 || s.Commands != 0) {
			t.Errorf("step %d: %d allocations, %d descriptor pools, %d command buffers; want none", i, s.Allocations, s.Pools, s.Commands)
		}
		// K and V in the cache's float16, Q and O in float32, the lengths
		// and (paged) the page table as int32.
		tables := B
		if page > 0 {
			tables += B * cache.Config().Capacity / page
		}
		if want := uint64(B*HKV*2*D*2 + 2*B*H*D*4 + 4*tables); s.StagingBytes != want {
			t.Errorf("step %d: %d bytes staged, want %d", i, s.StagingBytes, want)
		}
	}
	views := map[int]bool{}
	for i := 0; i < 12; i++ {
		plan, err := step.Plan()
		if err != nil {
			t.Fatal(err)
		}
		view := plan.Dims.S
		perStep(i, run(i), !views[view])
		views[view] = true
		if i == 5 { // the longest sequence is at 256: the next view is 512
			for b, want := range []int{256, 96} {
				if got := cache.Lengths()[b]; got != want {
					t.Fatalf("after 6 steps sequence %d holds %d tokens, want %d", b, got, want)
				}
			}
		}
	}
	if !views[256] || !views[512] {
		t.Errorf("steps from 251 to 262 tokens read views %v, want 256 and 512", views)
	}
	// Up to the capacity: the last view is the capacity, then ErrCapacity
	// with nothing appended.
	k, v := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D)
	full := cache.Config().Capacity // paged: whole pages
	for cache.Lengths()[0] < full {
		if err := cache.AppendTo(0, k[:HKV*D], v[:HKV*D], 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := step.Run(context.Background(), k, v, devtest.RandomValues(r, B*H*D), o); !errors.Is(err, vkattn.ErrCapacity) {
		t.Errorf("a step past the capacity: %v, want ErrCapacity", err)
	}
	if got := cache.Lengths(); got[0] != full || got[1] != 102 {
		t.Errorf("lengths %v after a refused step, want [%d 102]", got, full)
	}
	for _, c := range []struct {
		heads int
		opts  vkattn.Options
		want  error
	}{
		{0, vkattn.Options{}, vkattn.ErrHeads},
		{3, vkattn.Options{}, vkattn.ErrHeads},
		{1 << 40, vkattn.Options{}, vkattn.ErrTooLarge},
		{H, vkattn.Options{WantLSE: true}, vkattn.ErrOption},
		{H, vkattn.Options{Causal: vkattn.CausalTopLeft}, vkattn.ErrOption},
		{H, vkattn.Options{Softcap: -1}, vkattn.ErrOption},
	} {
		if s, err := cache.PrepareStep(c.heads, c.opts); !errors.Is(err, c.want) {
			s.Close()
			t.Errorf("PrepareStep(%d, %+v): %v, want %v", c.heads, c.opts, err, c.want)
		}
	}
	if _, err := step.Run(context.Background(), k, v, make([]float32, 3), o); !errors.Is(err, vkattn.ErrShape) {
		t.Errorf("a step with 3 query values: %v, want ErrShape", err)
	}
}

// On discrete memory an append is one submission whatever B and HKV: the
// host's tokens (Append) go into every sequence and head, with the page
// table and the lengths, in one submission and one host wait; the device
// tensors' (AppendTensors) in one submission the host does not wait for.
// The cache then attends as its history says.
func TestAppendIsOneRoundTrip(t *testing.T) {
	d := devtest.NVIDIADev
	if d.Memory() != vkattn.DiscreteMemory {
		t.Fatalf("the NVIDIA plan's device has %v memory, want discrete", d.Memory())
	}
	const B, H, HKV, D = 2, 4, 2, 16
	for _, page := range []int{0, 8} {
		t.Run(fmt.Sprintf("page %d", page), func(t *testing.T) {
			r := rand.New(rand.NewSource(73))
			cfg := kv.Config{B: B, HKV: HKV, Capacity: 64, DK: D, DV: D, PageSize: page}
			cache, hist := filledCache(t, d, r, cfg, 5, 3)
			k, v := devtest.RandomValues(r, B*HKV*9*D), devtest.RandomValues(r, B*HKV*9*D)
			before := d.Stats()
			if err := cache.Append(k, v, 9); err != nil {
				t.Fatal(err)
			}
			if s := d.Stats().Since(before); s.Submits != 1 || s.Waits != 1 {
				t.Errorf("Append of 9 tokens to %d sequences of %d heads: %d submissions, %d waits; want 1 and 1", B, HKV, s.Submits, s.Waits)
			}
			for b := 0; b < B; b++ {
				hist.add(b, k[b*HKV*9*D:(b+1)*HKV*9*D], v[b*HKV*9*D:(b+1)*HKV*9*D], 9)
			}
			kt, vt := devtest.RandomValues(r, B*HKV*2*D), devtest.RandomValues(r, B*HKV*2*D)
			kT, vT := devtest.Upload(t, d, []int{B, HKV, 2, D}, kt), devtest.Upload(t, d, []int{B, HKV, 2, D}, vt)
			before = d.Stats()
			if err := cache.AppendTensors(kT, vT); err != nil {
				t.Fatal(err)
			}
			if s := d.Stats().Since(before); s.Submits != 1 || s.Waits != 0 {
				t.Errorf("AppendTensors of 2 tokens: %d submissions, %d waits; want 1 and 0", s.Submits, s.Waits)
			}
			for b := 0; b < B; b++ {
				hist.add(b, kt[b*HKV*2*D:(b+1)*HKV*2*D], vt[b*HKV*2*D:(b+1)*HKV*2*D], 2)
			}
			qData := devtest.RandomValues(r, B*H*D)
			o, _ := attendOnce(t, cache, devtest.Upload(t, d, []int{B, H, 1, D}, qData), vkattn.Options{})
			hist.check(t, "after the appends", o, qData, H, 1, vkattn.Options{})
		})
	}
}

// Goroutines sharing one decode step take turns: every step appends its
// token (the lengths grow by one per Run), none fails, and the cache's
// lengths and every output stay consistent; a Close racing the last runs
// ends them with ErrClosed or lets them finish, never worse.
func TestConcurrentDecodeSteps(t *testing.T) {
	const B, H, HKV, D, runs, workers = 1, 2, 1, 8, 5, 4
	d := devtest.Dev
	cache, err := kv.New(d, kv.Config{B: B, HKV: HKV, Capacity: 64, DK: D, DV: D})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	step := devtest.PrepareStep(t, cache, H, vkattn.Options{})
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			r := rand.New(rand.NewSource(int64(90 + w)))
			o := make([]float32, B*H*D)
			for i := 0; i < runs; i++ {
				if _, err := step.Run(context.Background(), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D), o); err != nil {
					errs <- err
					return
				}
				for _, x := range o {
					if x != x || x < -1 || x > 1 { // a weighted mean of values in [-1, 1]
						errs <- fmt.Errorf("output %v outside the values' range", x)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := cache.Lengths()[0]; got != workers*runs {
		t.Errorf("after %d steps the sequence holds %d tokens", workers*runs, got)
	}
	done := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewSource(99))
		_, err := step.Run(context.Background(), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D), make([]float32, B*H*D))
		done <- err
	}()
	step.Close()
	if err := <-done; err != nil && !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("a step racing Close: %v, want success or ErrClosed", err)
	}
	if _, err := step.Run(context.Background(), nil, nil, nil, nil); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("a step after Close: %v, want ErrClosed", err)
	}
}

// A decode step over a cache larger than one binding reaches runs the
// chunked call (each chunk through buffer windows) inside its one
// submission, with discrete memory too, and equals each sequence's
// attention over its history.
func TestDecodeStepChunked(t *testing.T) {
	for _, memory := range []vkattn.MemoryModel{vkattn.AutoMemory, vkattn.DiscreteMemory} {
		t.Run(memory.String(), func(t *testing.T) {
			d := devtest.SmallBindings(t, vkattn.Config{Memory: memory})
			const B, H, HKV, D = 2, 4, 2, 32
			r := rand.New(rand.NewSource(77))
			cache, hist := filledCache(t, d, r, kv.Config{B: B, HKV: HKV, Capacity: 600, DK: D, DV: D}, 300, 290)
			step := devtest.PrepareStep(t, cache, H, vkattn.Options{})
			defer step.Close()
			plan, err := step.Plan()
			if err != nil {
				t.Fatal(err)
			}
			if plan.Kernel.Chunks < 2 {
				t.Fatalf("plan %v: want a call in chunks", plan.Kernel)
			}
			o := make([]float32, B*H*D)
			for i := 0; i < 3; i++ {
				k, v, q := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
				before := d.Stats()
				if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
					t.Fatal(err)
				}
				if s := d.Stats().Since(before); s.Submits != 1 || s.Waits != 1 {
					t.Errorf("step %d: %d submissions, %d waits; want 1 and 1", i, s.Submits, s.Waits)
				}
				for b := 0; b < B; b++ {
					hist.add(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
				}
				hist.check(t, fmt.Sprintf("chunked step %d", i), o, q, H, 1, vkattn.Options{})
			}
		})
	}
}

// fork makes sequence dst's history a copy of src's, as Cache.Fork does.
func (h *history) fork(src, dst int) {
	for j := range h.k[src] {
		h.k[dst][j] = append([]float32(nil), h.k[src][j]...)
		h.v[dst][j] = append([]float32(nil), h.v[src][j]...)
	}
}

// Forked sequences share the prompt's pages: after two forks the pool
// holds the prompt's pages once; the first append into the shared, partly
// filled last page copies that page alone for each sequence that writes
// while another still holds it (copy on write), full pages stay shared;
// each sequence then attends over its own history (the prompt and its own
// tokens); freeing every sequence returns every page. On lavapipe's plan
// (appends) and the NVIDIA plan with discrete memory (decode steps, whose
// page copies go into their one submission); float32 and q8_0 pools (whose
// page copies carry the block scales too).
func TestForkSharesPages(t *testing.T) {
	for _, c := range []struct {
		plan string
		dt   vkattn.DType
		D    int
	}{{"auto", vkattn.Float32, 16}, {"nvidia", vkattn.Float32, 16}, {"auto", vkattn.Q8_0, 32}, {"nvidia", vkattn.Q8_0, 32}} {
		plan, D := c.plan, c.D
		t.Run(fmt.Sprintf("%s/%v", plan, c.dt), func(t *testing.T) {
			d := devtest.EveryPlan()[plan]
			const B, H, HKV, page, prompt = 3, 4, 2, 8, 21
			r := rand.New(rand.NewSource(79))
			cfg := kv.Config{B: B, HKV: HKV, Capacity: 64, DK: D, DV: D, PageSize: page, DType: c.dt}
			cache, hist := filledCache(t, d, r, cfg, prompt)
			for _, dst := range []int{1, 2} {
				if err := cache.Fork(0, dst); err != nil {
					t.Fatal(err)
				}
				hist.fork(0, dst)
			}
			promptPages := (prompt + page - 1) / page
			if got := cache.PagesInUse(); got != promptPages {
				t.Fatalf("after two forks %d pages in use, want the prompt's %d", got, promptPages)
			}
			if got := cache.Lengths(); got[1] != prompt || got[2] != prompt {
				t.Fatalf("forked lengths %v", got)
			}
			step := devtest.PrepareStep(t, cache, H, vkattn.Options{})
			defer step.Close()
			o := make([]float32, B*H*D)
			for i := 0; i < 4; i++ {
				k, v, q := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*H*D)
				if plan == "nvidia" {
					before := d.Stats()
					if _, err := step.Run(context.Background(), k, v, q, o); err != nil {
						t.Fatal(err)
					}
					if s := d.Stats().Since(before); s.Submits != 1 || s.Waits != 1 {
						t.Errorf("step %d: %d submissions, %d waits; want 1 and 1", i, s.Submits, s.Waits)
					}
				} else if err := cache.Append(k, v, 1); err != nil {
					t.Fatal(err)
				}
				for b := 0; b < B; b++ {
					hist.add(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
				}
				if plan != "nvidia" {
					o = attendAll(t, cache, devtest.Upload(t, d, []int{B, H, 1, D}, q))
				}
				hist.check(t, fmt.Sprintf("step %d", i), o, q, H, 1, vkattn.Options{})
				if i == 0 {
					// Sequences 0 and 1 wrote into the page three shared:
					// a copy each; sequence 2 wrote into it alone.
					if got, want := cache.PagesInUse(), promptPages+2; got != want {
						t.Errorf("after the first append %d pages in use, want %d (the full pages still shared)", got, want)
					}
				}
			}
			if err := cache.Reset(); err != nil {
				t.Fatal(err)
			}
			if got := cache.PagesInUse(); got != 0 {
				t.Errorf("after Reset %d pages in use, want 0", got)
			}
			if err := cache.Fork(0, 3); !errors.Is(err, vkattn.ErrShape) {
				t.Errorf("Fork to sequence 3 of 3: %v, want ErrShape", err)
			}
		})
	}
	contiguous, err := kv.New(devtest.Dev, kv.Config{B: 2, HKV: 1, Capacity: 8, DK: 4, DV: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer contiguous.Close()
	if err := contiguous.Fork(0, 1); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("Fork in a contiguous cache: %v, want ErrOption", err)
	}
}

// attendAll is attendOnce's output alone.
func attendAll(t *testing.T, cache *kv.Cache, q *vkattn.Tensor) []float32 {
	t.Helper()
	o, _ := attendOnce(t, cache, q, vkattn.Options{})
	return o
}

// Random appends, forks and truncations of a small paged pool, against a
// host model of each sequence's tokens: every refusal (a full pool, past
// the capacity) leaves the cache as it was, the pages in use never exceed
// the pool nor what the sequences need without sharing, and each
// sequence attends over exactly its own tokens. Reset returns every page.
func TestForkAppendTruncateRandomly(t *testing.T) {
	const B, H, HKV, D, page, capacity, pages = 4, 2, 1, 8, 4, 24, 12
	r := rand.New(rand.NewSource(83))
	cache, hist := filledCache(t, devtest.Dev, r, kv.Config{B: B, HKV: HKV, Capacity: capacity, DK: D, DV: D, PageSize: page, Pages: pages}, 5)
	lens := func() []int { return cache.Lengths() }
	checked, refused := 0, 0
	// appended reports whether an append went in; a refusal (a full pool,
	// past the capacity) must leave the lengths as they were.
	appended := func(op int, before []int, err error) bool {
		switch {
		case err == nil:
			return true
		case errors.Is(err, vkattn.ErrCapacity):
			refused++
			if got := lens(); !slices.Equal(got, before) {
				t.Fatalf("op %d: a refused append changed the lengths %v -> %v", op, before, got)
			}
			return false
		}
		t.Fatalf("op %d: append: %v", op, err)
		return false
	}
	for op := 0; op < 150; op++ {
		before := lens()
		switch r.Intn(4) {
		case 0: // one sequence grows
			b, n := r.Intn(B), 1+r.Intn(6)
			k, v := devtest.RandomValues(r, HKV*n*D), devtest.RandomValues(r, HKV*n*D)
			if appended(op, before, cache.AppendTo(b, k, v, n)) {
				hist.add(b, k, v, n)
			}
		case 1: // a fork
			src, dst := r.Intn(B), r.Intn(B)
			if err := cache.Fork(src, dst); err != nil {
				t.Fatalf("op %d: Fork(%d, %d): %v", op, src, dst, err)
			}
			if src != dst {
				hist.fork(src, dst)
			}
		case 2: // a rollback
			b := r.Intn(B)
			to := before
			to[b] = r.Intn(before[b] + 1)
			if err := cache.Truncate(to); err != nil {
				t.Fatalf("op %d: Truncate(%v): %v", op, to, err)
			}
			hist.truncate(b, to[b])
		case 3: // every sequence grows by one
			k, v := devtest.RandomValues(r, B*HKV*D), devtest.RandomValues(r, B*HKV*D)
			if appended(op, before, cache.Append(k, v, 1)) {
				for b := 0; b < B; b++ {
					hist.add(b, k[b*HKV*D:(b+1)*HKV*D], v[b*HKV*D:(b+1)*HKV*D], 1)
				}
			}
		}
		need := 0
		for _, n := range lens() {
			need += (n + page - 1) / page
		}
		if used := cache.PagesInUse(); used > pages || used > need {
			t.Fatalf("op %d: %d pages in use of %d; the sequences (%v) need %d unshared", op, used, pages, lens(), need)
		}
		if op%10 == 9 {
			ls := lens()
			if slices.Min(ls) == 0 {
				continue // a query needs its own token in the cache
			}
			checked++
			q := devtest.RandomValues(r, B*H*D)
			o := attendAll(t, cache, devtest.Upload(t, devtest.Dev, []int{B, H, 1, D}, q))
			hist.check(t, fmt.Sprintf("after op %d", op), o, q, H, 1, vkattn.Options{})
		}
	}
	if checked < 5 || refused == 0 {
		t.Errorf("%d attention checks and %d refusals in 150 operations: the mix does not test what it means to", checked, refused)
	}
	if err := cache.Reset(); err != nil {
		t.Fatal(err)
	}
	if used := cache.PagesInUse(); used != 0 {
		t.Errorf("after Reset %d pages in use", used)
	}
}
