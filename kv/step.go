package kv

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/vk"
)

// DecodeStep is a KV cache's decode step, prepared once: Run appends one
// token's keys and values to every sequence, attends with the token's
// queries over the cache and returns the output. A step is one queue
// submission and one host wait whatever B and HKV: the token's K, V and
// Q, the lengths and the page table go through a host-visible staging
// buffer of the step's own, copied into the cache by commands recorded
// ahead of the attention in the same submission, and O comes back the
// same way. That is the round trip a discrete GPU pays once per token,
// where Append, Write and Download pay one each per transfer.
//
// Its work follows the cache's length, not its capacity: the attention
// reads the cache through a view of the first stepBucket(n) positions
// for sequences of up to n tokens, a power of two from minStepBucket,
// and each such length is prepared once, when the sequences first reach
// it (its only allocations). Steady-state steps allocate nothing.
//
// A step must not run while another step or an append of its cache is
// under way (they take turns on the cache's lock, so nothing breaks, but
// the lengths then decide which runs first).
type DecodeStep struct {
	mu     sync.Mutex
	cache  *Cache
	heads  int
	opts   vkattn.Options
	q      *engine.Tensor // (B, H, 1, DK) float32: the calls' query
	stage  *vk.Buffer     // host-visible: K, V, Q and the tables in; O out
	at     stepLayout
	calls  map[int]*engine.Call // by the length of the view they read
	closed bool
}

// stepLayout is where each part lies in a step's staging buffer (bytes).
type stepLayout struct {
	k, v, q, ints, o, size uint64
}

// minStepBucket is the shortest view a step reads: below it the split-K
// launch is a few workgroups whatever the length.
const minStepBucket = 256

// stepBucket is the length of the cache view a step reads when its
// longest sequence holds n tokens: the power of two at or above n (at
// least minStepBucket), at most the capacity. Paged caches round up to
// whole pages.
func stepBucket(n, capacity, pageSize int) int {
	b := max(minStepBucket, 1<<bits.Len(uint(max(n, 1)-1)))
	if pageSize > 0 {
		b = (b + pageSize - 1) / pageSize * pageSize
	}
	return min(b, capacity)
}

// PrepareStep prepares the decode step of queries of heads query heads
// (a multiple of the cache's HKV) with opts, as Cache.Attention takes
// them; a step returns O only, so WantLSE and WantWeights are refused.
func (c *Cache) PrepareStep(heads int, opts vkattn.Options) (*DecodeStep, error) {
	if c == nil {
		return nil, errNoCache
	}
	cfg := c.cfg
	if err := engine.CheckOpen(c.dev); err != nil {
		return nil, err
	}
	if heads <= 0 || heads%cfg.HKV != 0 {
		return nil, core.Errorf(vkattn.ErrHeads, "decode step of %d query heads over %d KV heads: want a positive multiple", heads, cfg.HKV)
	}
	if n := float64(cfg.B) * float64(heads) * float64(max(cfg.DK, cfg.DV)); n > math.MaxInt32 {
		return nil, core.Errorf(vkattn.ErrTooLarge, "decode step of %d query heads: %.3g elements per query, at most 2^31", heads, n)
	}
	if opts.WantLSE || opts.WantWeights {
		return nil, core.Errorf(vkattn.ErrOption, "a decode step returns O only: WantLSE and WantWeights are for Cache.Attention")
	}
	if err := c.checkOptions(opts); err != nil {
		return nil, err
	}
	s := &DecodeStep{cache: c, heads: heads, opts: opts, calls: map[int]*engine.Call{}}
	fail := func(err error) (*DecodeStep, error) {
		s.Close()
		return nil, err
	}
	var err error
	if s.q, err = engine.UploadBounded(c.dev, []int{cfg.B, heads, 1, cfg.DK}, make([]float32, cfg.B*heads*cfg.DK), vkattn.Float32, engine.WriteHeadroom); err != nil {
		return fail(err)
	}
	at := &s.at
	at.v, at.q = c.kvStaging(cfg.B)
	at.ints = at.q + align16(uint64(cfg.B*heads*cfg.DK)*4)
	tables := cfg.B // key lengths
	if c.pt != nil {
		tables += cfg.B * c.pt.perItem
	}
	if c.rope != nil && c.rope.lengths != nil {
		// A rolling cache's RoPE rows of the new token (twice) and its
		// queries' rows.
		tables += cfg.B * (2*c.rope.r.RotatedDims(cfg.DK) + 1)
	}
	at.o = at.ints + align16(uint64(tables)*4)
	at.size = at.o + uint64(cfg.B*heads*cfg.DV)*4
	if s.stage, err = engine.VK(c.dev).NewHostBuffer(at.size); err != nil {
		return fail(engine.DeviceError(err))
	}
	// The first view, so that options the call refuses fail here.
	c.mu.Lock()
	kept := c.stepKeptLocked()
	c.mu.Unlock()
	if _, err := s.callFor(kept); err != nil {
		return fail(err)
	}
	return s, nil
}

// kvStaging lays out n tokens' K and V of every KV head, as the cache
// stores them, in a step's staging buffer: K from 0, V from the returned
// offset, each from a multiple of 16 bytes; end is the first byte past
// both (a latent cache stages no V).
func (c *Cache) kvStaging(n int) (v, end uint64) {
	cfg := c.cfg
	v = align16(uint64(cfg.DType.StorageBytes(n * cfg.HKV * cfg.DK)))
	vRow := cfg.DV
	if cfg.Latent {
		vRow = 0 // V is the keys' leading columns: nothing of its own to stage
	}
	return v, v + align16(uint64(cfg.DType.StorageBytes(n*cfg.HKV*vRow)))
}

// align16 rounds n bytes up to a multiple of 16.
func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// callFor is the attention call of a step after which the sequences hold
// kept positions (stepKeptLocked): over the view of the cache that holds
// them, prepared the first time that view is needed. The caller holds
// s.mu.
func (s *DecodeStep) callFor(kept []int) (*engine.Call, error) {
	c := s.cache
	cfg := c.cfg
	longest := min(slices.Max(kept), cfg.Capacity)
	view := stepBucket(longest, cfg.Capacity, cfg.PageSize)
	if call, ok := s.calls[view]; ok {
		return call, nil
	}
	opts := s.opts
	opts.KeyLengths = make([]int, cfg.B)
	for b, n := range kept {
		opts.KeyLengths[b] = min(n, view)
	}
	opts.Causal = vkattn.CausalBottomRight
	opts.AlignToKeyLengths = true
	call, err := engine.PrepareOver(c.dev, s.q, engine.Prefix(c.k, view), engine.Prefix(c.v, view), opts, c.callRefs())
	if err != nil {
		return nil, err
	}
	s.calls[view] = call
	return call, nil
}

// Run appends a token to every sequence, k (B, HKV, 1, DK) and v (B, HKV,
// 1, DV) (a latent cache's k alone: v nil), attends with its queries q
// (B, H, 1, DK) and writes the output, (B, H, 1, DV), into o; all
// row-major. The checks and refusals are Append's (ErrCapacity past the
// capacity, nothing appended then) and Write's for q. A ctx done while
// waiting returns at once and leaves the step running on the device (the
// token is appended); a failure before the submission leaves the cache as
// it was.
func (s *DecodeStep) Run(ctx context.Context, k, v, q, o []float32) (time.Duration, error) {
	if err := s.lock("used"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	c := s.cache
	cfg := c.cfg
	vWant := cfg.B * cfg.HKV * cfg.DV
	if cfg.Latent {
		vWant = 0 // V is the keys' leading columns
	}
	for _, x := range []struct {
		name string
		data []float32
		want int
	}{{"k", k, cfg.B * cfg.HKV * cfg.DK}, {"v", v, vWant}, {"q", q, cfg.B * s.heads * cfg.DK}, {"o", o, cfg.B * s.heads * cfg.DV}} {
		if len(x.data) != x.want {
			if x.name == "v" && cfg.Latent {
				return 0, core.Errorf(vkattn.ErrShape, "decode step: a latent KV cache stores the keys alone (V is their leading %d columns): v must be empty, not %d values", cfg.DV, len(v))
			}
			return 0, core.Errorf(vkattn.ErrShape, "decode step: %s has %d values, want %d", x.name, len(x.data), x.want)
		}
	}
	var rawV []byte
	if !cfg.Latent {
		var err error
		if rawV, err = c.encode(c.v, v); err != nil {
			return 0, fmt.Errorf("values: %w", err)
		}
	}
	rawQ, err := engine.Encode(s.q, q)
	if err != nil {
		return 0, fmt.Errorf("queries: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return 0, err
	}
	// The keys are rotated (with RoPE) at the positions they go to.
	rawK, err := c.encode(c.k, c.rotateKeysLocked(c.everySequence(), k, 1))
	if err != nil {
		return 0, fmt.Errorf("keys: %w", err)
	}
	// Past the capacity or the pool, storeLocked refuses inside before:
	// nothing is submitted and the cache is restored.
	call, err := s.callFor(c.stepKeptLocked())
	if err != nil {
		return 0, err
	}
	for _, part := range []struct {
		off uint64
		raw []byte
	}{{s.at.k, rawK}, {s.at.v, rawV}, {s.at.q, rawQ}} {
		if err := s.stage.Write(part.off, part.raw); err != nil {
			return 0, engine.DeviceError(err)
		}
	}
	saved := c.saveLocked()
	out := call.Output().O
	before := func(cmds *vk.Commands) error {
		ints := s.at.ints
		putInts := func(t *engine.Tensor, off int, xs []int) error {
			raw := engine.Int32Words(xs)
			if err := s.stage.Write(ints, raw); err != nil {
				return err
			}
			err := cmds.Copy(s.stage, ints, engine.Buf(t), uint64(4*off), uint64(len(raw)))
			ints += uint64(len(raw))
			return err
		}
		put := func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
			base := [2]uint64{s.at.k, s.at.v}[i]
			return engine.EachSpan(cfg.DType, cfg.B*cfg.HKV*w, first*w, engine.Elements(dst), dstElem, rows*w, func(from, to engine.ByteSpan) error {
				return cmds.Copy(s.stage, base+from.Off, engine.Buf(dst), to.Off, to.N)
			})
		}
		if err := c.storeLocked(c.everySequence(), 1, cacheWriter{rows: put, ints: putInts, page: c.recordPageCopy(cmds)}); err != nil {
			return err
		}
		return cmds.Copy(s.stage, s.at.q, engine.Buf(s.q), 0, uint64(len(rawQ)))
	}
	after := func(cmds *vk.Commands) error {
		return cmds.Copy(engine.Buf(out), uint64(4*engine.Layout(out).Offset), s.stage, s.at.o, uint64(4*len(o)))
	}
	t, err := engine.RunWith(ctx, call, before, after)
	if err != nil {
		if ctx.Err() == nil {
			c.restoreLocked(saved) // not submitted, or the device failed: nothing appended
		}
		return 0, err
	}
	return t, engine.DeviceError(s.stage.ReadFloat32(s.at.o/4, o))
}

// stepKeptLocked is the positions each sequence holds after a step's
// append: one more, less what a rolling cache then lets go. The caller
// holds c.mu.
func (c *Cache) stepKeptLocked() []int {
	return c.keptAfterLocked(slices.Repeat([]int{1}, c.cfg.B))
}

// Plan is the plan of the attention the next Run would launch.
func (s *DecodeStep) Plan() (vkattn.Plan, error) {
	if err := s.lock("used"); err != nil {
		return vkattn.Plan{}, err
	}
	defer s.mu.Unlock()
	c := s.cache
	c.mu.Lock()
	err := c.usable()
	kept := c.stepKeptLocked()
	c.mu.Unlock()
	if err != nil {
		return vkattn.Plan{}, err
	}
	call, err := s.callFor(kept)
	if err != nil {
		return vkattn.Plan{}, err
	}
	return call.Output().Plan.Plan, nil
}

// lock takes the step for a use (the verb what says it in a refusal); a
// nil or closed step is ErrClosed. The caller unlocks s.mu.
func (s *DecodeStep) lock(what string) error {
	if s == nil {
		return core.Errorf(vkattn.ErrClosed, "no decode step: the *DecodeStep is nil")
	}
	return lockOpen(&s.mu, &s.closed, "decode step "+what)
}

// lockOpen locks mu unless closed is set (then it stays unlocked and the
// thing named by what is ErrClosed).
func lockOpen(mu *sync.Mutex, closed *bool, what string) error {
	mu.Lock()
	if *closed {
		mu.Unlock()
		return core.Errorf(vkattn.ErrClosed, "%s after Close", what)
	}
	return nil
}

// Close frees the step's calls, query and staging buffer; the cache stays.
func (s *DecodeStep) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, call := range s.calls {
		call.Close()
	}
	s.calls = nil
	s.q.Close()
	s.stage.Close()
}
