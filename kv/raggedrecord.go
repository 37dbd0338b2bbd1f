package kv

import (
	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/vk"
)

// Record records a ragged step into a host program's command buffer
// instead of running it (SEMANTICS.md §13.2), as DecodeStep.Record does a
// decode step: the appends of counts[b] new tokens of each sequence from
// k (1, HKV, total, DK) and v (1, HKV, total, DV), the attention of their
// queries q (1, H, total, DK) and the outputs into o (1, H, total, DV),
// packed as Run takes them, all device tensors whose rows lie one after
// another: k and v of the cache's element type and within its bound, q and
// o float32. Nothing is recorded for a step of no token. The cache counts
// the tokens as appended at Record: the host submits the command buffer
// once, after any earlier recorded step of the cache, and before the
// cache is read or appended to by anything else. It takes caches of
// float32, float16 or bfloat16 storage without RoPE, a rolling window or
// latent rows (ErrOption otherwise); refusals leave the cache as it was.
func (s *RaggedStep) Record(cmd vkattn.CommandBuffer, counts []int, k, v, q, o *vkattn.Tensor) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	sh, err := s.shape(counts)
	if err != nil {
		return err
	}
	c := s.cache
	H := s.cfg.Heads
	if s.cfg.Options.WantLSE {
		return core.Errorf(vkattn.ErrOption, "recording a ragged step: a recorded step writes O alone; prepare it without WantLSE")
	}
	ts, err := c.recordedTensors("a ragged step", [4]*vkattn.Tensor{k, v, q, o}, 1, H, sh.total)
	if err != nil {
		return err
	}
	if sh.total == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	// An append vkattn submitted itself (AppendTensors) finishes first:
	// the host's submission may go to another queue, unordered with it.
	c.settleLocked()
	rows, calls, err := s.calls(sh)
	if err != nil {
		return err
	}
	cmds, err := engine.CallDevice(calls[0]).Foreign(cmd.Device, cmd.Buffer)
	if err != nil {
		return err
	}
	saved := c.saveLocked()
	if err := s.recordInto(cmds, sh, rows, calls, ts); err != nil {
		c.restoreLocked(saved)
		return err
	}
	return nil
}

// recordInto records a step into the host's cmds: a barrier that makes
// the host's writes of ts (k, v, q, o) visible, the appends from k and v,
// the calls' tables, the queries' rows from q, the calls, and their output
// rows into o. The caller holds s.mu and the cache's lock.
func (s *RaggedStep) recordInto(cmds *vk.Commands, sh raggedShape, rows int, calls []*engine.Call, ts [4]*engine.Tensor) error {
	cc := s.cache.cfg
	H := s.cfg.Heads
	cmds.Barrier()
	err := s.recordAppends(cmds, sh, func(i int, dst *engine.Tensor, dstElem, from, n, w int) error {
		return copyRows(cmds, ts[i], dst, dstElem, from, n, w)
	})
	if err != nil {
		return err
	}
	if err := s.recordTables(cmds, sh, rows); err != nil {
		return err
	}
	packed := func(i, b, h int) int { return h*sh.total + sh.first[b] }
	base := func(t *engine.Tensor) uint64 { return uint64(engine.Layout(t).Offset) * 4 }
	// The decode sequences' rows one by one: (b, h) of the decode call.
	decodeRegions := func(w int, from, to uint64) []vk.Region {
		var regions []vk.Region
		for h := range H {
			for _, b := range sh.decode {
				regions = append(regions, vk.Region{Src: from + uint64(packed(0, b, h)*w)*4, Dst: to + uint64((b*H+h)*w)*4, Size: uint64(w) * 4})
			}
		}
		return regions
	}
	q, o := ts[2], ts[3]
	for _, x := range []struct {
		dst     *engine.Tensor
		regions []vk.Region
	}{
		{s.decodeQ, decodeRegions(cc.DK, base(q), 0)},
		{s.chunkQ, s.chunkRegions(sh, rows, s.maxRows, cc.DK, base(q), 0, packed)},
	} {
		if err := cmds.CopyRegions(engine.Buf(q), engine.Buf(x.dst), x.regions); err != nil {
			return engine.DeviceError(err)
		}
	}
	gather := func(cmds *vk.Commands) error {
		for i, call := range calls {
			out := call.Output().O
			regions := reversed(s.chunkRegions(sh, rows, rows, cc.DV, base(o), base(out), packed))
			if i == len(calls)-1 && len(sh.decode) > 0 {
				regions = reversed(decodeRegions(cc.DV, base(o), base(out)))
			}
			if err := cmds.CopyRegions(engine.Buf(out), engine.Buf(o), regions); err != nil {
				return err
			}
		}
		return nil
	}
	return recordCalls(cmds, calls, gather, engine.Record)
}
