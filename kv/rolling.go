package kv

import (
	"math"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/vk"
)

// The rolling cache (SEMANTICS.md §4.4): its capacity and, with RoPE, the
// table rows of positions that run on past the capacity.

// checkRolling checks the pages of a cache's configuration and a rolling
// cache's window, and sets a rolling cache's capacity (SEMANTICS.md §4.4).
func checkRolling(cfg *Config) error {
	if cfg.PageSize < 0 || cfg.Pages < 0 {
		return core.Errorf(vkattn.ErrOption, "KV cache pages of %d positions, %d pages: want positive numbers (or 0)", cfg.PageSize, cfg.Pages)
	}
	if cfg.Window < 0 {
		return core.Errorf(vkattn.ErrOption, "KV cache Window %d: want 0 (keep every position) or a window of at least 1 position", cfg.Window)
	}
	if cfg.Window == 0 {
		return nil
	}
	if cfg.PageSize == 0 {
		return core.Errorf(vkattn.ErrOption, "a rolling KV cache (Window %d) lets go of whole pages: set PageSize", cfg.Window)
	}
	// A decode step holds the window, the new token and up to a page
	// less one position before the window.
	least := cfg.Window + cfg.PageSize - 1
	if least > math.MaxInt32 {
		return core.Errorf(vkattn.ErrTooLarge, "a rolling KV cache of Window %d and pages of %d positions holds up to Window + PageSize - 1 = %d positions of a sequence: at most 2^31-1", cfg.Window, cfg.PageSize, least)
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = least
	}
	if cfg.Capacity < least {
		return core.Errorf(vkattn.ErrOption, "a rolling KV cache of Window %d and pages of %d positions holds up to Window + PageSize - 1 = %d positions of a sequence decoding a token at a time: Capacity %d is less (0 picks it)", cfg.Window, cfg.PageSize, least, cfg.Capacity)
	}
	return nil
}

// cacheRoPE is a KV cache's rotary embedding: its RoPE and the (cos, sin)
// table of every position of the cache, which the queries of calls over
// it are rotated by on the device.
//
// A rolling cache's positions have no end: its table holds each
// sequence's last `rows` positions, each twice, at rows p % rows and
// rows + p % rows of the sequence's 2 * rows, written as they are
// appended; its lengths point each sequence's queries at the rows they
// read (rowOf), which for any call's queries are consecutive. A position
// overwrites the rows of the one `rows` before it, which lies below the
// first position kept (a sequence keeps at most `rows`), so truncating
// leaves the rows of what is kept; a fork writes the rows of dst's.
type cacheRoPE struct {
	r       *vkattn.RoPE
	table   *engine.Tensor
	lengths *engine.Tensor // int32 [B]: rolling only
	rows    int            // rolling: positions a sequence's table holds
}

// rowOf is the value of lengths[b] for sequence b of length n: the RoPE
// kernel reads query t of N at row t + lengths[b] - N, position
// p = n - N + t. With n = q*rows + r that row is p - (q-1)*rows of the
// sequence's own: p's, p % rows from either copy's start, and within
// [0, 2*rows) for N <= rows.
func (r *cacheRoPE) rowOf(b, n int) int { return 2*b*r.rows + r.rows + n%r.rows }

// newRollingRoPE allocates a rolling cache's RoPE table and lengths:
// rows for its capacity, the most positions a call's queries span.
// Zeroed, so that a call replayed over an emptied cache reads finite
// rows.
func (c *Cache) newRollingRoPE(r *vkattn.RoPE) error {
	cfg := c.cfg
	rot := r.RotatedDims(cfg.DK)
	c.rope = &cacheRoPE{r: r, rows: cfg.Capacity}
	var err error
	if c.rope.table, err = engine.NewTensor(c.dev, [4]int{1, 1, 1, cfg.B * 2 * cfg.Capacity * rot}, vkattn.Float32); err != nil {
		return err
	}
	if c.rope.lengths, err = engine.NewTensor(c.dev, [4]int{1, 1, 1, cfg.B}, vkattn.Float32); err != nil {
		return err
	}
	err = engine.VK(c.dev).Once(func(cmds *vk.Commands) error {
		for _, t := range []*engine.Tensor{c.rope.table, c.rope.lengths} {
			if err := cmds.Fill(engine.Buf(t), 0, engine.Buf(t).Size(), 0); err != nil {
				return err
			}
		}
		return nil
	})
	return engine.DeviceError(err)
}

// putRoPERows writes the RoPE table rows of positions [from, to) of
// sequence b of a rolling cache, twice each, with putInts (the rows'
// float32 bits as int32 words). to - from is at most the capacity.
func (c *Cache) putRoPERows(b, from, to int, putInts func(t *engine.Tensor, off int, xs []int) error) error {
	r, w := c.rope, c.rope.rows
	rot := r.r.RotatedDims(c.cfg.DK)
	for p := from; p < to; {
		i := p % w
		n := min(to-p, w-i) // up to the end of a copy
		positions := make([]int, n)
		for j := range positions {
			positions[j] = p + j
		}
		rows := engine.RoPETable(r.r, c.cfg.DK, positions)
		words := make([]int, len(rows))
		for j, x := range rows {
			words[j] = int(int32(math.Float32bits(x)))
		}
		for _, at := range []int{2*b*w + i, 2*b*w + w + i} {
			if err := putInts(r.table, at*rot, words); err != nil {
				return err
			}
		}
		p += n
	}
	return nil
}
