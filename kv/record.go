package kv

import (
	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/vk"
)

// Record records a step into a host program's command buffer instead of
// running it (SEMANTICS.md §13): the append of the token's k (B, HKV, 1,
// DK) and v (B, HKV, 1, DV) to every sequence, the attention of its
// queries q (B, H, 1, DK) over the cache and the write of the output into
// o (B, H, 1, DV), all device tensors whose rows lie one after another
// (tensors over the host's own buffers, TensorOver, or vkattn's): k and v
// of the cache's element type and within its bound, q and o float32. The
// lengths and the page table travel inside the command buffer; nothing is
// submitted and nothing is allocated after a length's first recording.
//
// The cache counts the token as appended at Record: the host submits the
// command buffer once, after any earlier recorded step of the cache, and
// before the cache is read or appended to by anything else. Record, like
// Run, begins with a barrier that makes the host's earlier compute and
// transfer writes visible and ends with one that makes O visible to its
// later compute, transfer and host reads. It takes caches of float32,
// float16 or bfloat16 storage without RoPE, a rolling window or latent
// rows (ErrOption otherwise: those run with Run). Refusals leave the cache
// as it was.
func (s *DecodeStep) Record(cmd vkattn.CommandBuffer, k, v, q, o *vkattn.Tensor) error {
	if err := s.lock("recorded"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	c := s.cache
	cfg := c.cfg
	ts, err := c.recordedTensors("a decode step", [4]*vkattn.Tensor{k, v, q, o}, cfg.B, s.heads, 1)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	// An append vkattn submitted itself (AppendTensors) finishes first:
	// the host's submission may go to another queue, unordered with it.
	c.settleLocked()
	call, err := s.callFor(c.stepKeptLocked())
	if err != nil {
		return err
	}
	cmds, err := engine.CallDevice(call).Foreign(cmd.Device, cmd.Buffer)
	if err != nil {
		return err
	}
	saved := c.saveLocked()
	out := call.Output().O
	before := func(cmds *vk.Commands) error {
		put := func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
			return copyRows(cmds, ts[i], dst, dstElem, first, rows, w)
		}
		putInts := func(t *engine.Tensor, off int, xs []int) error { return updateInts(cmds, t, off, xs) }
		if err := c.storeLocked(c.everySequence(), 1, cacheWriter{rows: put, ints: putInts, page: c.recordPageCopy(cmds)}); err != nil {
			return err
		}
		return cmds.Copy(engine.Buf(ts[2]), uint64(4*engine.Layout(ts[2]).Offset), engine.Buf(s.q), 0, uint64(4*cfg.B*s.heads*cfg.DK))
	}
	after := func(cmds *vk.Commands) error {
		return cmds.Copy(engine.Buf(out), uint64(4*engine.Layout(out).Offset), engine.Buf(ts[3]), uint64(4*engine.Layout(ts[3]).Offset), uint64(4*cfg.B*s.heads*cfg.DV))
	}
	if err := engine.Record(call, cmds, before, after); err != nil {
		c.restoreLocked(saved)
		return err
	}
	return nil
}

// recordedTensors checks the tensors a recorded step of the cache reads
// and writes (what names it in refusals): k (b, HKV, n, DK) and v (b,
// HKV, n, DV) of the cache's element type and within its bound, q (b,
// heads, n, DK) and o (b, heads, n, DV) float32, all vkattn's or the
// host's (TensorOver) on the cache's device with rows one after another.
// The cache must store floats without RoPE, a rolling window or latent
// rows: the others quantize or rotate on the host.
func (c *Cache) recordedTensors(what string, in [4]*vkattn.Tensor, b, heads, n int) ([4]*engine.Tensor, error) {
	cfg := c.cfg
	var ts [4]*engine.Tensor
	switch {
	case cfg.DType.Quantized(), c.rope != nil, cfg.Window > 0, cfg.Latent:
		return ts, core.Errorf(vkattn.ErrOption, "recording %s: a cache of %v storage%s is run with Run, which quantizes or rotates on the way; Record takes float caches without RoPE, a rolling window or latent rows",
			what, cfg.DType, map[bool]string{true: " with RoPE, a window or latent rows"}[c.rope != nil || cfg.Window > 0 || cfg.Latent])
	}
	for i, x := range [4]struct {
		name  string
		shape [4]int
		dtype vkattn.DType
	}{{"k", [4]int{b, cfg.HKV, n, cfg.DK}, cfg.DType}, {"v", [4]int{b, cfg.HKV, n, cfg.DV}, cfg.DType},
		{"q", [4]int{b, heads, n, cfg.DK}, vkattn.Float32}, {"o", [4]int{b, heads, n, cfg.DV}, vkattn.Float32}} {
		t := (*engine.Tensor)(in[i])
		if err := engine.CheckInput(c.dev, x.name, t); err != nil {
			return ts, err
		}
		switch {
		case t.Shape() != x.shape:
			return ts, core.Errorf(vkattn.ErrShape, "recording %s: %s has shape %v, want %v", what, x.name, t.Shape(), x.shape)
		case t.DType() != x.dtype:
			return ts, core.Errorf(vkattn.ErrOption, "recording %s: %s is %v, want %v", what, x.name, t.DType(), x.dtype)
		case !engine.RowMajor(t):
			return ts, core.Errorf(vkattn.ErrShape, "recording %s: %s is a strided view; its rows must lie one after another", what, x.name)
		}
		ts[i] = t
	}
	if most, limit := max(engine.Bound(ts[0]), engine.Bound(ts[1])), engine.Bound(c.k); most > limit {
		return ts, core.Errorf(vkattn.ErrOverflow, "recording %s: k or v may hold |x| up to %g, beyond the KV cache's bound %g", what, most, limit)
	}
	if bound := engine.Bound(ts[2]); bound > engine.WriteHeadroom {
		return ts, core.Errorf(vkattn.ErrOverflow, "recording %s: q may hold |x| up to %g, beyond the %g the step's calls were checked for", what, bound, float64(engine.WriteHeadroom))
	}
	return ts, nil
}
