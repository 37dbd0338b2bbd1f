package kv

import (
	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
)

// Sequences as a whole: truncation (speculative decoding's rollback),
// forks that share pages, the pages in use, and the lengths and page
// table the kernels read, written back after a change.

// syncPages writes the page table to the device with putInts (unused
// entries 0, never read: they lie past every length). The caller holds
// c.mu.
func (c *Cache) syncPages(putInts func(t *engine.Tensor, off int, xs []int) error) error {
	return putInts(c.pt.table, 0, c.pool.Table(c.pt.perItem))
}

// Truncate shortens the sequences to lens (speculative decoding rolls
// back); a length beyond a sequence's current one is ErrCapacity, and in
// a rolling cache a length whose next token's window reaches positions
// already let go is ErrOption (SEMANTICS.md §4.4).
func (c *Cache) Truncate(lens []int) error {
	if c == nil {
		return errNoCache
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	if len(lens) != c.cfg.B {
		return core.Errorf(vkattn.ErrShape, "truncate to %d lengths, the cache has %d sequences", len(lens), c.cfg.B)
	}
	c.settleLocked()
	for b, n := range lens {
		if n < 0 || n > c.lens[b] {
			return core.Errorf(vkattn.ErrCapacity, "truncate sequence %d of length %d to %d", b, c.lens[b], n)
		}
		if start := c.start(b); n > 0 && max(0, n-c.cfg.Window+1) < start {
			return core.Errorf(vkattn.ErrOption, "truncate sequence %d of a rolling cache to %d: the window of its next token reaches back to position %d, but the cache keeps positions from %d on (truncate to 0, or to at least %d)",
				b, n, max(0, n-c.cfg.Window+1), start, start+c.cfg.Window-1)
		}
	}
	copy(c.lens, lens)
	if c.pt != nil {
		// Pages past a sequence's new end are let go (back to the pool
		// unless another sequence shares them).
		for b, n := range lens {
			c.pool.Truncate(b, n)
		}
		if err := c.syncPages(engine.WriteInts); err != nil {
			return err
		}
	}
	return c.syncLengths(engine.WriteInts)
}

// Fork makes sequence dst a copy of sequence src (parallel sampling, beam
// search: continuations of one prompt) without copying anything: dst
// holds src's pages, which the two then share, and its tokens are src's.
// The first append to either into a shared, partly filled page copies
// that page alone (copy on write, on the device); a page goes back to the
// pool when no sequence holds it. dst's own tokens are let go first. Only
// a paged cache shares pages (ErrOption otherwise); src == dst changes
// nothing.
func (c *Cache) Fork(src, dst int) error {
	if c == nil {
		return errNoCache
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	if c.pt == nil {
		return core.Errorf(vkattn.ErrOption, "Fork shares pages: the cache must be paged (PageSize > 0)")
	}
	for _, b := range []int{src, dst} {
		if b < 0 || b >= c.cfg.B {
			return core.Errorf(vkattn.ErrShape, "sequence %d of a cache of %d", b, c.cfg.B)
		}
	}
	if src == dst {
		return nil
	}
	c.settleLocked()
	c.pool.Fork(src, dst)
	c.lens[dst] = c.lens[src]
	if err := c.syncPages(engine.WriteInts); err != nil {
		return err
	}
	if c.rope != nil && c.rope.lengths != nil {
		if err := c.putRoPERows(dst, c.start(dst), c.lens[dst], engine.WriteInts); err != nil {
			return err
		}
	}
	return c.syncLengths(engine.WriteInts)
}

// PagesInUse is how many pages of a paged cache's pool sequences hold
// (shared pages counted once); 0 for a contiguous cache.
func (c *Cache) PagesInUse() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pt == nil {
		return 0
	}
	return c.pool.InUse()
}

// Reset empties every sequence.
func (c *Cache) Reset() error {
	if c == nil {
		return errNoCache
	}
	return c.Truncate(make([]int, c.cfg.B))
}

// syncLengths writes the key lengths to the device with putInts: the
// positions each sequence holds (of a rolling cache, from its first kept
// one), and a rolling cache's RoPE rows of its queries. The caller holds
// c.mu.
func (c *Cache) syncLengths(putInts func(t *engine.Tensor, off int, xs []int) error) error {
	if c.cfg.Window == 0 {
		return putInts(c.lengths, 0, c.lens)
	}
	if err := putInts(c.lengths, 0, c.keptLocked()); err != nil {
		return err
	}
	if c.rope == nil {
		return nil
	}
	rows := make([]int, c.cfg.B)
	for b, n := range c.lens {
		rows[b] = c.rope.rowOf(b, n)
	}
	return putInts(c.rope.lengths, 0, rows)
}
