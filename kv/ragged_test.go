package kv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
)

// packedRows is sequence b's rows of x, packed (heads, total, d) as a
// ragged step takes them: (heads, counts[b], d).
func packedRows(x []float32, counts []int, b, heads, d int) []float32 {
	total, first := 0, 0
	for i, n := range counts {
		if i == b {
			first = total
		}
		total += n
	}
	var rows []float32
	for h := range heads {
		at := (h*total + first) * d
		rows = append(rows, x[at:at+counts[b]*d]...)
	}
	return rows
}

// raggedRun runs one step of counts with random tokens, adds them to the
// history and checks every sequence's outputs against the reference of
// that sequence alone over its whole history.
func raggedRun(t *testing.T, r *rand.Rand, step *kv.RaggedStep, hist *history, counts []int, H int, opts vkattn.Options, what string) {
	t.Helper()
	total := 0
	for _, n := range counts {
		total += n
	}
	k, v := devtest.RandomValues(r, hist.hkv*total*hist.dk), devtest.RandomValues(r, hist.hkv*total*hist.dv)
	q, o := devtest.RandomValues(r, H*total*hist.dk), make([]float32, H*total*hist.dv)
	if _, err := step.Run(context.Background(), counts, k, v, q, o); err != nil {
		t.Fatalf("%s, counts %v: %v", what, counts, err)
	}
	for b, n := range counts {
		if n == 0 {
			continue
		}
		hist.add(b, packedRows(k, counts, b, hist.hkv, hist.dk), packedRows(v, counts, b, hist.hkv, hist.dv), n)
		devtest.Compare(t, fmt.Sprintf("%s, counts %v, sequence %d", what, counts, b), packedRows(o, counts, b, H, hist.dv), hist.want(t, b, packedRows(q, counts, b, H, hist.dk), H, n, opts))
	}
}

// A ragged step appends each sequence's own number of tokens (none, one,
// a chunk) and every new token attends causally over its sequence, with
// a window and soft-capping counted within the sequence: on
// lavapipe's plan and the NVIDIA plan, contiguous and paged.
func TestRaggedStep(t *testing.T) {
	const B, H, HKV, D = 4, 4, 2, 16
	for _, plan := range devtest.OwnAndNVIDIA {
		for _, page := range []int{0, 16} {
			t.Run(fmt.Sprintf("%s/page %d", plan, page), func(t *testing.T) {
				d := devtest.EveryPlan()[plan]
				r := rand.New(rand.NewSource(5))
				cfg := kv.Config{B: B, HKV: HKV, Capacity: 96, DK: D, DV: D, PageSize: page}
				cache, hist := filledCache(t, d, r, cfg, 10, 0, 3, 20)
				// Score variants, counted within each sequence.
				opts := vkattn.Options{Window: &vkattn.Window{Left: 12, Right: 0}, Softcap: 15}
				step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 24, Chunks: 2, Options: opts})
				if err != nil {
					t.Fatal(err)
				}
				defer step.Close()
				// Each mix twice: the second finds its calls prepared, and
				// is one submission and one wait with no allocation.
				for i, counts := range [][]int{{0, 1, 5, 1}, {3, 1, 0, 1}, {1, 1, 1, 1}, {7, 0, 2, 1}, {0, 17, 0, 0}} {
					for again := range 2 {
						before := d.Stats()
						raggedRun(t, r, step, hist, counts, H, opts, fmt.Sprintf("step %d/%d", i, again))
						s := d.Stats().Since(before)
						if s.Submits != 1 || s.Waits != 1 {
							t.Errorf("step %d/%d, counts %v: %d submissions, %d host waits; want 1 and 1", i, again, counts, s.Submits, s.Waits)
						}
						if again == 1 && (s.Allocations != 0 || s.Pools != 0 || s.Commands != 0) {
							t.Errorf("step %d/%d, counts %v: %d allocations, %d descriptor pools, %d command buffers; want none", i, again, counts, s.Allocations, s.Pools, s.Commands)
						}
					}
				}
				// The plan says which rows went where.
				p, err := step.Plan([]int{0, 1, 5, 1})
				if err != nil {
					t.Fatal(err)
				}
				if p.Chunk == nil || p.Decode == nil || p.ChunkSequences != 1 || p.DecodeSequences != 2 || p.Chunk.Dims.L != p.ChunkRows || p.ChunkRows != 8 || p.Decode.Dims.L != 1 || p.Decode.Dims.B != B {
					t.Errorf("plan of counts [0 1 5 1]: %+v", p)
				}
				if !strings.Contains(p.String(), "prefill part: 1 sequence(s)") || !strings.Contains(p.String(), "decode part: 2 sequence(s)") {
					t.Errorf("plan of counts [0 1 5 1] reads %q", p)
				}
			})
		}
	}
}

// raggedCase is one configuration random ragged schedules run on.
type raggedCase struct {
	plan             string
	dt               vkattn.DType
	page             int
	rolling, rope    bool
	b, hkv, heads, d int
	opts             vkattn.Options
}

func (c raggedCase) String() string {
	s := fmt.Sprintf("%v/B%d H%d HKV%d", c.dt, c.b, c.heads, c.hkv)
	if c.page > 0 {
		s += fmt.Sprintf("/page %d", c.page)
	}
	if c.rolling {
		s += "/rolling"
	}
	if c.rope {
		s += "/rope"
	}
	return s
}

// raggedCases are the configurations of TestRaggedSchedules: each plan
// with each element type, the storage (contiguous, paged, rolling) turning
// from case to case so that every plan and every type meets each, RoPE on
// the float32 caches (whose keys the reference rotates in float64 as the
// cache stores them; a half or quantized cache rounds keys rotated in
// float32, a rounding TestKVCacheRoPE covers), and the batch and heads
// drawn by r; the score variants, which compile kernels of their own, are
// TestRaggedStep's.
func raggedCases(r *rand.Rand) []raggedCase {
	var cases []raggedCase
	for i, plan := range []string{"auto", "nvidia", "amd"} {
		for j, dt := range []vkattn.DType{vkattn.Float32, vkattn.Float16, vkattn.Q8_0, vkattn.Q4_0} {
			storage := (i + j) % 3
			c := raggedCase{plan: plan, dt: dt, d: 32, b: []int{1, 3, 8, 32}[r.Intn(4)], hkv: 1 + r.Intn(2)}
			c.heads = c.hkv * []int{1, 2, 4}[r.Intn(3)]
			c.page = []int{0, 16, 16}[storage]
			c.rolling = storage == 2
			c.rope = dt == vkattn.Float32
			if c.rolling {
				c.opts.Window = &vkattn.Window{Left: 47, Right: 0}
			}
			cases = append(cases, c)
		}
	}
	return cases
}

// raggedCounts draws one step's counts for sequences of lengths lens:
// mostly none or one token, some short chunks, and in one step of 40 one
// long chunk (up to 700 tokens), within the step's budget and chunk count
// and each sequence's room.
func raggedCounts(r *rand.Rand, lens []int, room func(b int) int, tokens, chunks int) []int {
	counts := make([]int, len(lens))
	long := -1
	if r.Intn(40) == 0 {
		long = r.Intn(len(lens))
	}
	total := 0
	for b := range counts {
		n := 0
		switch p := r.Intn(100); {
		case b == long:
			n = 33 + r.Intn(668)
		case p < 35:
		case p < 80:
			n = 1
		default:
			n = 2 + r.Intn(30)
		}
		if n > 1 && chunks == 0 {
			n = 1
		}
		n = min(n, room(b), tokens-total)
		if n > 1 {
			chunks--
		}
		counts[b] = n
		total += n
	}
	return counts
}

// 1,000 random schedules of ragged steps (sequences starting, growing by
// none, one or many tokens a step, reset or forked between steps) on
// lavapipe's plan and planned as NVIDIA and AMD, in float32, float16,
// q8_0 and q4_0 caches, contiguous, paged and rolling (with its window),
// with grouped-query heads and RoPE: every step's outputs equal the
// float64 reference of each sequence alone over its history.
func TestRaggedSchedules(t *testing.T) {
	const schedules, tokens, chunks = 1000, 768, 4
	cases := raggedCases(rand.New(rand.NewSource(2026)))
	// The plans are devices of their own: their cases run side by side,
	// each drawing from a source of its own.
	perCase := make([]int, len(cases))
	for i := range perCase {
		perCase[i] = (schedules*(i+1))/len(cases) - (schedules*i)/len(cases)
	}
	sum := 0
	for _, n := range perCase {
		sum += n
	}
	if sum != schedules {
		t.Fatalf("%d schedules planned, want %d", sum, schedules)
	}
	for _, plan := range []string{"auto", "nvidia", "amd"} {
		t.Run(plan, func(t *testing.T) {
			t.Parallel()
			for i, c := range cases {
				if c.plan != plan {
					continue
				}
				t.Run(c.String(), func(t *testing.T) {
					raggedCaseRun(t, c, perCase[i], rand.New(rand.NewSource(int64(i))), tokens, chunks)
				})
			}
		})
	}
}

// raggedCaseRun runs n random schedules of case c.
func raggedCaseRun(t *testing.T, c raggedCase, n int, r *rand.Rand, tokens, chunks int) {
	d := devtest.EveryPlan()[c.plan]
	cfg := kv.Config{B: c.b, HKV: c.hkv, Capacity: 1024, DK: c.d, DV: c.d, DType: c.dt, PageSize: c.page}
	if c.rolling {
		cfg.Window, cfg.Capacity = 48, 48+c.page-1+700
	}
	var rope *vkattn.RoPE
	if c.rope {
		rope = &vkattn.RoPE{Theta: 10000, Dims: 16, Style: vkattn.RoPEHalf}
		cfg.RoPE = rope
	}
	cache, err := kv.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: c.heads, Tokens: tokens, Chunks: chunks, Options: c.opts})
	if err != nil {
		t.Fatal(err)
	}
	defer step.Close()
	for s := range n {
		if err := cache.Reset(); err != nil {
			t.Fatal(err)
		}
		hist := newHistory(c.b, c.hkv, c.d, c.d, c.dt)
		for i := range 2 + r.Intn(3) {
			lens := cache.Lengths()
			switch {
			case i > 0 && c.page > 0 && !c.rolling && c.b > 1 && r.Intn(4) == 0:
				src, dst := r.Intn(c.b), r.Intn(c.b)
				if err := cache.Fork(src, dst); err != nil {
					t.Fatal(err)
				}
				hist.fork(src, dst)
			case i > 0 && r.Intn(4) == 0:
				b := r.Intn(c.b)
				lens[b] = 0
				if err := cache.Truncate(lens); err != nil {
					t.Fatal(err)
				}
				hist.truncate(b, 0)
			}
			lens = cache.Lengths()
			room := func(b int) int {
				if c.rolling {
					return 700
				}
				return cfg.Capacity - lens[b]
			}
			counts := raggedCounts(r, lens, room, tokens, chunks)
			raggedSchedule(t, r, step, hist, counts, lens, c, rope, fmt.Sprintf("schedule %d step %d", s, i))
		}
	}
}

// raggedSchedule is raggedRun with the history of a cache that may rotate
// keys and queries (RoPE) at their positions, lens the lengths before the
// step.
func raggedSchedule(t *testing.T, r *rand.Rand, step *kv.RaggedStep, hist *history, counts, lens []int, c raggedCase, rope *vkattn.RoPE, what string) {
	t.Helper()
	total := 0
	for _, n := range counts {
		total += n
	}
	k, v := devtest.RandomValues(r, c.hkv*total*c.d), devtest.RandomValues(r, c.hkv*total*c.d)
	q, o := devtest.RandomValues(r, c.heads*total*c.d), make([]float32, c.heads*total*c.d)
	if _, err := step.Run(context.Background(), counts, k, v, q, o); err != nil {
		t.Fatalf("%s, counts %v: %v", what, counts, err)
	}
	for b, n := range counts {
		if n == 0 {
			continue
		}
		kb, qb := packedRows(k, counts, b, c.hkv, c.d), packedRows(q, counts, b, c.heads, c.d)
		if rope != nil {
			kb, qb = devtest.RotatedFrom(kb, c.hkv, n, c.d, rope, lens[b]), devtest.RotatedFrom(qb, c.heads, n, c.d, rope, lens[b])
		}
		hist.add(b, kb, packedRows(v, counts, b, c.hkv, c.d), n)
		devtest.Compare(t, fmt.Sprintf("%s, counts %v, sequence %d", what, counts, b), packedRows(o, counts, b, c.heads, c.d), hist.want(t, b, qb, c.heads, n, c.opts))
	}
}

// A ragged step refuses what it cannot run and leaves every sequence as
// it was: counts of the wrong number, negative, past the budget or the
// chunk count, a step past one sequence's capacity or the pool's pages
// (nothing appended for any sequence, and the next step still right),
// packed data of the wrong size, options a step cannot return, and use
// after Close.
func TestRaggedStepRefusals(t *testing.T) {
	const B, H, HKV, D = 3, 2, 1, 8
	d := devtest.Dev
	r := rand.New(rand.NewSource(9))
	cfg := kv.Config{B: B, HKV: HKV, Capacity: 32, DK: D, DV: D, PageSize: 8, Pages: 6}
	cache, hist := filledCache(t, d, r, cfg, 4, 30, 0)
	for _, c := range []struct {
		cfg  kv.RaggedConfig
		want error
	}{
		{kv.RaggedConfig{Heads: 0, Tokens: 8}, vkattn.ErrHeads},
		{kv.RaggedConfig{Heads: H, Tokens: 0}, vkattn.ErrEmpty},
		{kv.RaggedConfig{Heads: H, Tokens: 8, Chunks: -1}, vkattn.ErrEmpty},
		{kv.RaggedConfig{Heads: H, Tokens: 8, Options: vkattn.Options{WantWeights: true}}, vkattn.ErrOption},
		{kv.RaggedConfig{Heads: H, Tokens: 8, Options: vkattn.Options{Causal: vkattn.CausalTopLeft}}, vkattn.ErrOption},
		{kv.RaggedConfig{Heads: H, Tokens: 1 << 40}, vkattn.ErrTooLarge},
	} {
		if s, err := cache.PrepareRagged(c.cfg); !errors.Is(err, c.want) {
			s.Close()
			t.Errorf("PrepareRagged(%+v): %v, want %v", c.cfg, err, c.want)
		}
	}
	step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 8, Chunks: 1})
	if err != nil {
		t.Fatal(err)
	}
	run := func(counts []int, kn, qn, on int) error {
		_, err := step.Run(context.Background(), counts, make([]float32, kn), make([]float32, kn), make([]float32, qn), make([]float32, on))
		return err
	}
	rows := func(n int) (int, int, int) { return HKV * n * D, H * n * D, H * n * D }
	for _, c := range []struct {
		counts []int
		sizes  [3]int
		want   error
	}{
		{[]int{1, 1}, [3]int{HKV * 2 * D, H * 2 * D, H * 2 * D}, vkattn.ErrLengths},
		{[]int{1, -1, 1}, [3]int{0, 0, 0}, vkattn.ErrLengths},
		{[]int{5, 0, 4}, [3]int{HKV * 9 * D, H * 9 * D, H * 9 * D}, vkattn.ErrLengths},  // past the budget
		{[]int{2, 0, 2}, [3]int{HKV * 4 * D, H * 4 * D, H * 4 * D}, vkattn.ErrLengths},  // two chunks
		{[]int{1, 3, 1}, [3]int{HKV * 5 * D, H * 5 * D, H * 5 * D}, vkattn.ErrCapacity}, // sequence 1 past 32
		{[]int{1, 1, 1}, [3]int{HKV * 3 * D, H * 3 * D, H*3*D - 1}, vkattn.ErrShape},
	} {
		kn, qn, on := c.sizes[0], c.sizes[1], c.sizes[2]
		if err := run(c.counts, kn, qn, on); !errors.Is(err, c.want) {
			t.Errorf("counts %v: %v, want %v", c.counts, err, c.want)
		}
	}
	if got := cache.Lengths(); !slices.Equal(got, []int{4, 30, 0}) {
		t.Fatalf("lengths %v after refused steps, want [4 30 0]", got)
	}
	step.Close()
	step, err = cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 16, Chunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer step.Close()
	// The pool: 6 pages of 8, 5 held (1 + 4); 9 new tokens of sequence 2
	// need 2 more.
	kn, qn, on := rows(12)
	if _, err := step.Run(context.Background(), []int{3, 0, 9}, make([]float32, kn), make([]float32, kn), make([]float32, qn), make([]float32, on)); !errors.Is(err, vkattn.ErrCapacity) {
		t.Errorf("a step past the pool's pages: %v, want ErrCapacity", err)
	}
	if got, pages := cache.Lengths(), cache.PagesInUse(); !slices.Equal(got, []int{4, 30, 0}) || pages != 5 {
		t.Fatalf("lengths %v, %d pages in use after a step past the pool, want [4 30 0] and 5", got, pages)
	}
	raggedRun(t, r, step, hist, []int{3, 1, 2}, H, vkattn.Options{}, "after the refusals")
	// Recording checks its tensors before it touches the cache.
	if err := step.Record(vkattn.CommandBuffer{}, []int{1, 1, 1}, nil, nil, nil, nil); err == nil {
		t.Error("a step recorded with nil tensors: no error")
	}
	if got := cache.Lengths(); !slices.Equal(got, []int{7, 31, 2}) {
		t.Errorf("lengths %v after a refused recording, want [7 31 2]", got)
	}
	step.Close()
	if err := step.Record(vkattn.CommandBuffer{}, []int{1, 1, 1}, nil, nil, nil, nil); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("a step recorded after Close: %v, want ErrClosed", err)
	}
	if err := run([]int{1, 1, 1}, HKV*3*D, H*3*D, H*3*D); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("a step run after Close: %v, want ErrClosed", err)
	}
	var none *kv.RaggedStep
	if _, err := none.Run(context.Background(), nil, nil, nil, nil, nil); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("a nil step: %v, want ErrClosed", err)
	}
	none.Close()
}

// A ragged step over a latent cache (SEMANTICS.md §2): the keys alone are
// appended, V their leading columns, on lavapipe's plan and NVIDIA's.
func TestRaggedStepLatent(t *testing.T) {
	devtest.InParallel(t, devtest.OwnAndNVIDIA, func(t *testing.T, plan string) {
		d := devtest.EveryPlan()[plan]
		const B, H, DK, DV = 3, 4, 48, 32
		r := rand.New(rand.NewSource(48))
		cache, err := kv.New(d, kv.Config{B: B, HKV: 1, Capacity: 64, DK: DK, DV: DV, PageSize: 8, Latent: true})
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Close()
		hist := newHistory(B, 1, DK, DV, vkattn.Float32)
		opts := vkattn.Options{Scale: vkattn.CustomScale(0.2)}
		step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 16, Options: opts})
		if err != nil {
			t.Fatal(err)
		}
		defer step.Close()
		for i, counts := range [][]int{{5, 0, 9}, {1, 3, 1}, {1, 1, 0}} {
			total := counts[0] + counts[1] + counts[2]
			k, q := devtest.RandomValues(r, total*DK), devtest.RandomValues(r, H*total*DK)
			o := make([]float32, H*total*DV)
			if _, err := step.Run(t.Context(), counts, k, nil, q, o); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			for b, n := range counts {
				if n == 0 {
					continue
				}
				kb := packedRows(k, counts, b, 1, DK)
				hist.add(b, kb, leading(kb, DK, DV), n)
				devtest.Compare(t, fmt.Sprintf("step %d, sequence %d", i, b), packedRows(o, counts, b, H, DV), hist.want(t, b, packedRows(q, counts, b, H, DK), H, n, opts))
			}
		}
	})
}

// With WantLSE a ragged step returns each new token's log-sum-exp beside
// its output (RunLSE), packed as O, equal to the reference's, with sinks
// and a window, on lavapipe's plan and NVIDIA's; Run leaves it out, RunLSE
// on a step without WantLSE is ErrOption, and a recorded step, which
// writes O alone, refuses WantLSE.
func TestRaggedStepLSE(t *testing.T) {
	const B, H, HKV, D = 3, 4, 2, 16
	for _, plan := range devtest.OwnAndNVIDIA {
		t.Run(plan, func(t *testing.T) {
			d := devtest.EveryPlan()[plan]
			r := rand.New(rand.NewSource(21))
			cache, hist := filledCache(t, d, r, kv.Config{B: B, HKV: HKV, Capacity: 64, DK: D, DV: D, PageSize: 8}, 9, 0, 30)
			opts := vkattn.Options{WantLSE: true, Sinks: []float32{0.5, -1, 2, 0}, Window: &vkattn.Window{Left: 6, Right: 0}}
			step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 16, Chunks: 2, Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			defer step.Close()
			for i, counts := range [][]int{{4, 1, 1}, {1, 0, 7}, {1, 1, 1}} {
				total := counts[0] + counts[1] + counts[2]
				k, v := devtest.RandomValues(r, HKV*total*D), devtest.RandomValues(r, HKV*total*D)
				q, o, lse := devtest.RandomValues(r, H*total*D), make([]float32, H*total*D), make([]float32, H*total)
				if _, err := step.RunLSE(context.Background(), counts, k, v, q, o, lse); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				for b, n := range counts {
					if n == 0 {
						continue
					}
					hist.add(b, packedRows(k, counts, b, HKV, D), packedRows(v, counts, b, HKV, D), n)
					want := hist.reference(t, b, packedRows(q, counts, b, H, D), H, n, opts)
					what := fmt.Sprintf("%s step %d, sequence %d", plan, i, b)
					devtest.Compare(t, what+" O", packedRows(o, counts, b, H, D), want.O)
					devtest.Compare(t, what+" LSE", packedRows(lse, counts, b, H, 1), want.LSE)
				}
			}
			if err := step.Record(vkattn.CommandBuffer{}, []int{1, 1, 1}, nil, nil, nil, nil); !errors.Is(err, vkattn.ErrOption) {
				t.Errorf("recording a step with WantLSE: %v, want ErrOption", err)
			}
			plain, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			x := make([]float32, 3*H*D)
			if _, err := plain.RunLSE(context.Background(), []int{1, 1, 1}, x[:3*HKV*D], x[:3*HKV*D], x, x, make([]float32, 3*H)); !errors.Is(err, vkattn.ErrOption) {
				t.Errorf("RunLSE on a step without WantLSE: %v, want ErrOption", err)
			}
		})
	}
}

// Ragged steps run from several goroutines at once take turns (every
// step's tokens appended once), and a step whose context is already done
// runs nothing and appends nothing.
func TestRaggedStepConcurrentAndCancelled(t *testing.T) {
	const B, H, HKV, D, steps = 2, 2, 1, 8, 6
	cache, err := kv.New(devtest.Dev, kv.Config{B: B, HKV: HKV, Capacity: 64, DK: D, DV: D, PageSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: H, Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer step.Close()
	counts := []int{1, 1}
	errs := make(chan error, 2*steps)
	for range 2 {
		go func() {
			k, q := make([]float32, B*HKV*D), make([]float32, B*H*D)
			for range steps {
				_, err := step.Run(context.Background(), counts, k, k, q, make([]float32, B*H*D))
				errs <- err
			}
		}()
	}
	for range 2 * steps {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := cache.Lengths(); !slices.Equal(got, []int{2 * steps, 2 * steps}) {
		t.Fatalf("lengths %v after %d steps from two goroutines, want [%d %d]", got, 2*steps, 2*steps, 2*steps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x := make([]float32, B*H*D)
	if _, err := step.Run(ctx, counts, x[:B*HKV*D], x[:B*HKV*D], x, x); !errors.Is(err, context.Canceled) {
		t.Errorf("a step with its context done: %v, want context.Canceled", err)
	}
	if got := cache.Lengths(); !slices.Equal(got, []int{2 * steps, 2 * steps}) {
		t.Errorf("lengths %v after a cancelled step, want them unchanged", got)
	}
}
