package kv

import (
	"context"
	"fmt"
	"slices"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/pipelines"
)

// Attention over the cache: the options a call over it takes, the
// lengths and causal alignment the cache sets, and what a rolling
// cache's window may still reach.

// Attention attends with q, (B, H, L, DK), the queries of each sequence's
// last L tokens, over the cache: query t of sequence b sits at position
// Lengths()[b] - L + t and sees the positions up to it (bottom-right
// causal by construction); Window and ALiBi positions count the same way.
// Options other than KeyLengths, QueryLengths, Causal and
// AlignToKeyLengths, which the cache sets, apply as for Device.Attention;
// over a rolling cache a Window within the cache's is required, and its
// reach checked (SEMANTICS.md §4.4).
func (c *Cache) Attention(q *vkattn.Tensor, opts vkattn.Options) (*vkattn.Output, error) {
	return c.AttentionContext(context.Background(), q, opts)
}

// AttentionContext is Attention with a context that can cancel the wait.
func (c *Cache) AttentionContext(ctx context.Context, q *vkattn.Tensor, opts vkattn.Options) (*vkattn.Output, error) {
	if c == nil {
		return nil, errNoCache
	}
	out, err := engine.RunOnce(ctx, func() (*engine.Call, error) { return c.prepare((*engine.Tensor)(q), opts) })
	if err != nil {
		return nil, err
	}
	return engine.PublicOutput[*vkattn.Output](out), nil
}

// Prepare records an attention call over the cache (see Attention). Each
// Run reads the cache as it is then: a decode step appends its token,
// writes its query into q and runs the call again.
func (c *Cache) Prepare(q *vkattn.Tensor, opts vkattn.Options) (*vkattn.Call, error) {
	if c == nil {
		return nil, errNoCache
	}
	call, err := c.prepare((*engine.Tensor)(q), opts)
	if err != nil {
		return nil, err
	}
	return engine.PublicCall[*vkattn.Call](call), nil
}

func (c *Cache) prepare(q *engine.Tensor, opts vkattn.Options) (*engine.Call, error) {
	if err := c.checkOptions(opts); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return nil, err
	}
	if q == nil {
		return nil, core.Errorf(vkattn.ErrShape, "Q is nil")
	}
	l := q.Shape()[2]
	for b, n := range c.lens {
		if n < l {
			return nil, core.Errorf(vkattn.ErrLengths, "sequence %d holds %d tokens, fewer than the %d queries (a query's own token must be appended first)", b, n, l)
		}
	}
	if err := c.reachLocked(l, opts.Window); err != nil {
		return nil, err
	}
	opts.KeyLengths = c.keptLocked()
	opts.Causal = vkattn.CausalBottomRight
	opts.AlignToKeyLengths = true
	call, err := engine.PrepareOver(c.dev, q, c.k, c.v, opts, c.callRefs())
	if err != nil || c.cfg.Window == 0 {
		return call, err
	}
	// Each run reads the lengths as they are then: so is the window's
	// reach checked.
	w := *opts.Window
	engine.SetCheck(call, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if err := c.usable(); err != nil {
			return err
		}
		return c.reachLocked(l, &w)
	})
	return call, nil
}

// keptLocked is the positions each sequence holds: its length, less a
// rolling cache's positions let go. The caller holds c.mu.
func (c *Cache) keptLocked() []int {
	kept := slices.Clone(c.lens)
	for b := range kept {
		kept[b] -= c.start(b)
	}
	return kept
}

// start is sequence b's first position held: 0 but in a rolling cache.
// The caller holds c.mu.
func (c *Cache) start(b int) int {
	if c.cfg.Window == 0 {
		return 0
	}
	return c.pool.First(b) * c.cfg.PageSize
}

// reachLocked refuses (ErrOption) a call of l queries with window w over
// a rolling cache whose first query's window reaches a position the cache
// let go (SEMANTICS.md §4.4). The caller holds c.mu.
func (c *Cache) reachLocked(l int, w *vkattn.Window) error {
	if c.cfg.Window == 0 {
		return nil
	}
	for b, n := range c.lens {
		if from, start := n-l-w.Left, c.start(b); from < start && start > 0 {
			return core.Errorf(vkattn.ErrOption, "a call of %d queries with a window of Left = %d over sequence %d of a rolling cache: query 0 sees from position %d on, but the cache keeps positions from %d on (the window of the tokens last appended: call with their queries)",
				l, w.Left, b, max(0, from), start)
		}
	}
	return nil
}

// checkOptions refuses the options a call over the cache cannot take:
// those the cache sets, and over a rolling cache a window reaching past
// what it keeps and masks over its moving key places.
func (c *Cache) checkOptions(opts vkattn.Options) error {
	if err := checkCacheOptions(opts); err != nil {
		return err
	}
	w := c.cfg.Window
	if w == 0 {
		return nil
	}
	if opts.Window == nil || opts.Window.Left < 0 || opts.Window.Left > w-1 {
		got := "none"
		if opts.Window != nil {
			got = fmt.Sprintf("Left = %d", opts.Window.Left)
		}
		return core.Errorf(vkattn.ErrOption, "a rolling KV cache of Window %d keeps the last %d positions a query sees: a call over it needs Options.Window with Left in [0, %d], not %s", w, w, w-1, got)
	}
	if opts.Mask != nil || len(opts.BoolMasks) > 0 {
		return core.Errorf(vkattn.ErrOption, "a rolling KV cache moves its keys as it lets go of pages: a call over it takes no Mask or BoolMasks")
	}
	return nil
}

// checkCacheOptions refuses the options a call over a KV cache sets
// itself.
func checkCacheOptions(opts vkattn.Options) error {
	if opts.KeyLengths != nil || opts.QueryLengths != nil || opts.Causal != vkattn.NotCausal || opts.AlignToKeyLengths {
		return core.Errorf(vkattn.ErrOption, "a KV cache call sets KeyLengths, QueryLengths, Causal and AlignToKeyLengths itself")
	}
	if opts.RoPE != nil {
		return core.Errorf(vkattn.ErrOption, "a KV cache call rotates by the cache's RoPE (kv.Config.RoPE): Options.RoPE must be nil")
	}
	if v := pipelines.VariantsOf(&opts).Refused(true, false); v != "" {
		return core.Errorf(vkattn.ErrOption, "a KV cache call does not take %s", v)
	}
	return nil
}

// pagedRefs are a call's references to the cache's pages (when paged),
// reading the lengths in lengths.
func (c *Cache) pagedRefs(lengths *engine.Tensor) *engine.CacheRefs {
	r := &engine.CacheRefs{Lengths: lengths}
	if pt := c.pt; pt != nil {
		r.PageTable, r.PageSize, r.Pages, r.PerItem = pt.table, pt.size, pt.pages, pt.perItem
	}
	return r
}

// callRefs are what the cache adds to a call over it.
func (c *Cache) callRefs() *engine.CacheRefs {
	r := c.pagedRefs(c.lengths)
	if c.rope != nil {
		// The query rotation finds each sequence's table rows at the key
		// lengths, or a rolling cache's own.
		r.RoPE, r.RoPETable, r.RoPELengths = c.rope.r, c.rope.table, c.rope.lengths
		if r.RoPELengths == nil {
			r.RoPELengths = c.lengths
		}
	}
	return r
}
