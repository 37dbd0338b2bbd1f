package kv

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/vk"
)

// Running a ragged step: the step's shape, the appends and the calls
// recorded into one command buffer, the queries and outputs moved between
// the packed rows and the calls'.

// raggedShape is one step's tokens: each sequence's count, where its rows
// start in the packed tensors, and which sequences go to which call.
type raggedShape struct {
	counts, first  []int
	total          int
	decode, chunks []int // sequences of one token; of more, in order
	chunkAt        []int // where chunk i's rows start in the chunk areas
	longest        int   // the longest chunk
}

// shape checks a step's counts against the step's limits.
func (s *RaggedStep) shape(counts []int) (raggedShape, error) {
	cc := s.cache.cfg
	if len(counts) != cc.B {
		return raggedShape{}, core.Errorf(vkattn.ErrLengths, "ragged step: %d counts for a cache of %d sequences", len(counts), cc.B)
	}
	sh := raggedShape{counts: counts, first: make([]int, cc.B)}
	inChunks := 0 // the chunks' tokens so far
	for b, n := range counts {
		if n < 0 {
			return raggedShape{}, core.Errorf(vkattn.ErrLengths, "ragged step: sequence %d brings %d tokens", b, n)
		}
		sh.first[b] = sh.total
		sh.total += n
		if sh.total > s.cfg.Tokens {
			return raggedShape{}, core.Errorf(vkattn.ErrLengths, "ragged step: %d or more new tokens, beyond the step's budget of %d (RaggedConfig.Tokens)", sh.total, s.cfg.Tokens)
		}
		switch {
		case n == 1:
			sh.decode = append(sh.decode, b)
		case n > 1:
			sh.chunkAt = append(sh.chunkAt, s.cfg.Heads*inChunks)
			inChunks += n
			sh.chunks = append(sh.chunks, b)
			sh.longest = max(sh.longest, n)
		}
	}
	if len(sh.chunks) > s.cfg.Chunks {
		return raggedShape{}, core.Errorf(vkattn.ErrLengths, "ragged step: %d sequences bring more than one token, beyond the step's %d (RaggedConfig.Chunks)", len(sh.chunks), s.cfg.Chunks)
	}
	if sh.longest > s.maxRows {
		return raggedShape{}, core.Errorf(vkattn.ErrCapacity, "ragged step: a chunk of %d tokens, more than the cache's %d positions", sh.longest, cc.Capacity)
	}
	return sh, nil
}

// Run appends counts[b] new tokens to sequence b and attends with their
// queries: k (1, HKV, total, DK), v (1, HKV, total, DV) (a latent cache's
// k alone: v empty) and q (1, H, total, DK) packed as the varlen API packs
// them (sequence b's tokens are rows first[b] .. first[b]+counts[b]-1 of
// each head, first the sum of the counts before b), o (1, H, total, DV)
// the same; all row-major. Nothing runs for a step of no token. Refusals
// (counts, the budget, ErrCapacity past a sequence's capacity or the
// pool's pages) leave every sequence as it was. A ctx done while waiting
// returns at once and leaves the step running (its tokens appended).
func (s *RaggedStep) Run(ctx context.Context, counts []int, k, v, q, o []float32) (time.Duration, error) {
	return s.RunLSE(ctx, counts, k, v, q, o, nil)
}

// RunLSE is Run that also writes each new token's log-sum-exp into lse,
// (1, H, total) packed as o (SEMANTICS.md §7: -Inf, or the head's sink,
// for a row that sees no key), for merging with other partial
// attentions; the step needs Options.WantLSE. A nil lse returns none.
func (s *RaggedStep) RunLSE(ctx context.Context, counts []int, k, v, q, o, lse []float32) (time.Duration, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	sh, err := s.shape(counts)
	if err != nil {
		return 0, err
	}
	c := s.cache
	cc := c.cfg
	H := s.cfg.Heads
	vWant := cc.HKV * sh.total * cc.DV
	if cc.Latent {
		vWant = 0
	}
	for _, x := range []struct {
		name string
		data []float32
		want int
	}{{"k", k, cc.HKV * sh.total * cc.DK}, {"v", v, vWant}, {"q", q, H * sh.total * cc.DK}, {"o", o, H * sh.total * cc.DV}, {"lse", lse, H * sh.total}} {
		if x.name == "lse" && lse == nil {
			continue
		}
		if len(x.data) != x.want {
			return 0, core.Errorf(vkattn.ErrShape, "ragged step of %d tokens: %s has %d values, want %d", sh.total, x.name, len(x.data), x.want)
		}
	}
	if lse != nil && !s.cfg.Options.WantLSE {
		return 0, core.Errorf(vkattn.ErrOption, "ragged step: an lse to fill, but the step was prepared without Options.WantLSE")
	}
	if sh.total == 0 {
		return 0, nil
	}
	// The previous step's submission, if a done ctx left it in flight.
	if err := s.cmds.Wait(ctx); err != nil {
		return 0, engine.DeviceError(err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return 0, err
	}
	// With RoPE, keys and queries turn at their positions here: the
	// queries of a step's calls are not rotated on the device.
	packed := func(b, h, t int) int { return h*sh.total + sh.first[b] + t }
	every := c.everySequence()
	k, q = c.rotateTokensLocked(k, every, sh.counts, cc.HKV, packed), c.rotateTokensLocked(q, every, sh.counts, H, packed)
	rawK, err := c.encode(c.k, k)
	if err != nil {
		return 0, fmt.Errorf("keys: %w", err)
	}
	var rawV []byte
	if !cc.Latent {
		if rawV, err = c.encode(c.v, v); err != nil {
			return 0, fmt.Errorf("values: %w", err)
		}
	}
	// The calls' query tensors (both of the step's bound) take q's rows.
	if err := engine.CheckWrite(s.decodeQ, q); err != nil {
		return 0, fmt.Errorf("queries: %w", err)
	}
	qDecode, qChunks := s.packQueries(sh, q)
	rows, calls, err := s.calls(sh)
	if err != nil {
		return 0, err
	}
	for _, part := range []struct {
		off uint64
		raw []byte
	}{{s.at.k, rawK}, {s.at.v, rawV}} {
		if len(part.raw) > 0 {
			if err := s.stage.Write(part.off, part.raw); err != nil {
				return 0, engine.DeviceError(err)
			}
		}
	}
	for _, part := range []struct {
		off uint64
		xs  []float32
	}{{s.at.qDecode, qDecode}, {s.at.qChunks, qChunks}} {
		if len(part.xs) > 0 {
			if err := s.stage.WriteFloat32(part.off/4, part.xs); err != nil {
				return 0, engine.DeviceError(err)
			}
		}
	}
	saved := c.saveLocked()
	if err := s.record(sh, rows, calls); err != nil {
		c.restoreLocked(saved) // nothing submitted: nothing appended
		return 0, err
	}
	if err := s.cmds.Submit(); err != nil {
		c.restoreLocked(saved)
		return 0, engine.DeviceError(err)
	}
	if err := s.cmds.Wait(ctx); err != nil {
		if ctx.Err() == nil {
			c.restoreLocked(saved) // the device failed
		}
		return 0, engine.DeviceError(err)
	}
	t, _, err := s.cmds.Elapsed(0, 1)
	if err != nil {
		return 0, engine.DeviceError(err)
	}
	outs := [][]float32{o, lse}
	for i, p := range s.planes() {
		if outs[i] != nil {
			if err := s.unpack(sh, p, outs[i]); err != nil {
				return t, engine.DeviceError(err)
			}
		}
	}
	return t, nil
}

// packQueries lays q's rows out as the calls read them: the decode
// sequences' at (b, h) of a (B, H, DK) area, the chunks' chunk by chunk,
// head by head. It returns the two areas (empty where no sequence goes).
func (s *RaggedStep) packQueries(sh raggedShape, q []float32) (decode, chunks []float32) {
	decode, chunks = sh.areas(s.hostQ, s.cache.cfg.B, s.cfg.Heads, s.cache.cfg.DK)
	sh.moveRows(s.cfg.Heads, s.cache.cfg.DK, q, decode, chunks, false)
	return decode, chunks
}

// unpack reads output p back from the staging buffer into dst, packed
// as Run returns it.
func (s *RaggedStep) unpack(sh raggedShape, p outPlane, dst []float32) error {
	decode, chunks := sh.areas(p.host, s.cache.cfg.B, s.cfg.Heads, p.width)
	for _, x := range []struct {
		at   uint64
		area []float32
	}{{p.decodeAt, decode}, {p.chunksAt, chunks}} {
		if len(x.area) > 0 {
			if err := s.stage.ReadFloat32(x.at/4, x.area); err != nil {
				return err
			}
		}
	}
	sh.moveRows(s.cfg.Heads, p.width, dst, decode, chunks, true)
	return nil
}

// areas are the decode call's (B, H, w) area and the chunks' area of a
// host copy laid out as the staging buffer's (the decode area empty when
// no sequence brings one token).
func (sh raggedShape) areas(host []float32, B, H, w int) (decode, chunks []float32) {
	if len(sh.decode) > 0 {
		decode = host[:B*H*w]
	}
	return decode, host[B*H*w:][:(sh.total-len(sh.decode))*H*w]
}

// moveRows copies each new token's rows of width w between packed, (H,
// total, w) as Run takes them, and the areas: into them, or back into
// packed when toPacked.
func (sh raggedShape) moveRows(H, w int, packed, decode, chunks []float32, toPacked bool) {
	move := func(p, area []float32) {
		if toPacked {
			copy(p, area)
		} else {
			copy(area, p)
		}
	}
	for h := range H {
		for _, b := range sh.decode {
			at := (h*sh.total + sh.first[b]) * w
			move(packed[at:at+w], decode[(b*H+h)*w:])
		}
		for i, b := range sh.chunks {
			n := sh.counts[b]
			at := (h*sh.total + sh.first[b]) * w
			move(packed[at:at+n*w], chunks[(sh.chunkAt[i]+h*n)*w:])
		}
	}
}

// record records a step into s.cmds: the appends (page copies, rows, page
// table, lengths), the calls' lengths and page table, the queries'
// scatter, the calls, and the outputs' gather into the staging buffer.
// The caller holds s.mu and the cache's lock.
func (s *RaggedStep) record(sh raggedShape, rows int, calls []*engine.Call) error {
	c := s.cache
	cc := c.cfg
	cmds := s.cmds
	if err := cmds.Begin(); err != nil {
		return engine.DeviceError(err)
	}
	cmds.Timestamp(0)
	// The new rows from the staging buffer, packed as Run takes them.
	err := s.recordAppends(cmds, sh, func(i int, dst *engine.Tensor, dstElem, from, n, w int) error {
		base := [2]uint64{s.at.k, s.at.v}[i]
		return engine.EachSpan(cc.DType, cc.HKV*sh.total*w, from*w, engine.Elements(dst), dstElem, n*w, func(src, to engine.ByteSpan) error {
			return cmds.Copy(s.stage, base+src.Off, engine.Buf(dst), to.Off, to.N)
		})
	})
	if err != nil {
		return err
	}
	if err := s.recordTables(cmds, sh, rows); err != nil {
		return err
	}
	// The queries into each call's: the decode sequences' in one copy,
	// each chunk's a region per head (its item's last rows).
	dk, H := uint64(cc.DK), s.cfg.Heads
	if len(sh.decode) > 0 {
		if err := cmds.Copy(s.stage, s.at.qDecode, engine.Buf(s.decodeQ), 0, uint64(cc.B*H)*dk*4); err != nil {
			return engine.DeviceError(err)
		}
	}
	inArea := func(i, b, h int) int { return sh.chunkAt[i] + h*sh.counts[b] }
	if err := cmds.CopyRegions(s.stage, engine.Buf(s.chunkQ), s.chunkRegions(sh, rows, s.maxRows, cc.DK, s.at.qChunks, 0, inArea)); err != nil {
		return engine.DeviceError(err)
	}
	// The outputs back: the chunk call's first, the decode call's (the
	// last call, if any) after.
	gather := func(cmds *vk.Commands) error {
		for i, call := range calls {
			for _, p := range s.planes() {
				out := p.of(call.Output())
				base := uint64(engine.Layout(out).Offset) * 4
				if i == len(calls)-1 && len(sh.decode) > 0 {
					if err := cmds.Copy(engine.Buf(out), base, s.stage, p.decodeAt, uint64(cc.B*H*p.width)*4); err != nil {
						return err
					}
					continue
				}
				regions := reversed(s.chunkRegions(sh, rows, rows, p.width, p.chunksAt, base, inArea))
				if err := cmds.CopyRegions(engine.Buf(out), s.stage, regions); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := recordCalls(cmds, calls, gather, engine.RecordOwn); err != nil {
		return err
	}
	cmds.Timestamp(1)
	return engine.DeviceError(cmds.End())
}

// keptAfterLocked is the positions each sequence that brings tokens holds
// after appending counts[b] of them (0 for the others): its length and
// the new tokens, less what a rolling cache lets go first. The caller
// holds c.mu.
func (c *Cache) keptAfterLocked(counts []int) []int {
	cfg := c.cfg
	kept := make([]int, cfg.B)
	for b, n := range counts {
		if n == 0 {
			continue
		}
		l := c.lens[b]
		kept[b] = l + n - c.start(b)
		if cfg.Window > 0 {
			kept[b] = l + n - max(c.start(b), max(0, l-cfg.Window+1)/cfg.PageSize*cfg.PageSize)
		}
	}
	return kept
}

// recordAppends records the appends of a step's tokens into cmds: the
// page copies, rows, page table and lengths of one store per distinct
// count. put copies n rows of K (i 0) or V (i 1) of width w from packed
// row from ((h*total + first[b] + t) for token t of sequence b, head h) to
// element dstElem of dst. The caller holds s.mu and the cache's lock.
func (s *RaggedStep) recordAppends(cmds *vk.Commands, sh raggedShape, put func(i int, dst *engine.Tensor, dstElem, from, n, w int) error) error {
	c := s.cache
	cc := c.cfg
	putInts := func(t *engine.Tensor, off int, xs []int) error { return updateInts(cmds, t, off, xs) }
	page := c.recordPageCopy(cmds)
	var byCount [][]int
	for _, b := range append(slices.Clone(sh.decode), sh.chunks...) {
		i := slices.IndexFunc(byCount, func(g []int) bool { return sh.counts[g[0]] == sh.counts[b] })
		if i < 0 {
			byCount = append(byCount, []int{b})
		} else {
			byCount[i] = append(byCount[i], b)
		}
	}
	for _, seqs := range byCount {
		n := sh.counts[seqs[0]]
		// storeLocked numbers the rows of its sequences sequence by
		// sequence, head by head.
		rowsOf := func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
			seq, h, t := first/n/cc.HKV, first/n%cc.HKV, first%n
			return put(i, dst, dstElem, h*sh.total+sh.first[seqs[seq]]+t, rows, w)
		}
		if err := c.storeLocked(seqs, n, cacheWriter{rows: rowsOf, ints: putInts, page: page}); err != nil {
			return err
		}
	}
	return nil
}

// recordTables records each call's lengths and (the prefill's) page
// table, after the appends: the sequences of the other kind read as
// empty, their rows as padding. The caller holds s.mu and the cache's
// lock.
func (s *RaggedStep) recordTables(cmds *vk.Commands, sh raggedShape, rows int) error {
	c := s.cache
	cc := c.cfg
	kept := c.keptLocked()
	decodeLens := make([]int, 2*cc.B)
	for _, b := range sh.decode {
		decodeLens[b], decodeLens[cc.B+b] = kept[b], 1
	}
	n := s.cfg.Chunks
	chunkLens := make([]int, 2*n)
	perItem := engine.Elements(s.chunkTable) / n
	table := make([]int, n*perItem)
	var all []int
	if c.pt != nil {
		all = c.pool.Table(perItem)
	}
	for i, b := range sh.chunks {
		chunkLens[i], chunkLens[n+i] = kept[b], rows
		if c.pt != nil {
			copy(table[i*perItem:(i+1)*perItem], all[b*perItem:])
		} else {
			table[i] = b
		}
	}
	for _, x := range []struct {
		t  *engine.Tensor
		xs []int
	}{{s.decodeLens, decodeLens}, {s.chunkLens, chunkLens}, {s.chunkTable, table}} {
		if err := updateInts(cmds, x.t, 0, x.xs); err != nil {
			return engine.DeviceError(err)
		}
	}
	return nil
}

// calls are the calls a step of shape sh launches, the prefill's (if any)
// first, and the rows of the prefill call's items, preparing them the
// first time: over the view of the cache that holds what the sequences
// will after the appends. The caller holds s.mu and the cache's lock.
func (s *RaggedStep) calls(sh raggedShape) (rows int, calls []*engine.Call, err error) {
	c := s.cache
	cc := c.cfg
	kept := c.keptAfterLocked(sh.counts)
	view := stepBucket(slices.Max(kept), cc.Capacity, cc.PageSize)
	if len(sh.chunks) > 0 {
		rows = chunkRows(sh.longest, s.maxRows)
		call, err := s.chunkCall(rows, view)
		if err != nil {
			return 0, nil, err
		}
		calls = append(calls, call)
	}
	if len(sh.decode) > 0 {
		call, err := s.decodeCall(view)
		if err != nil {
			return 0, nil, err
		}
		calls = append(calls, call)
	}
	return rows, calls, nil
}

// chunkRegions are the copies of the chunks' rows of width w floats into
// a call tensor from base whose items hold stride rows a head, of which
// the step uses rows: chunk i (sequence b) of n tokens, head h, from row
// at(i, b, h) of the other buffer from from, into the last n of its item's
// rows.
func (s *RaggedStep) chunkRegions(sh raggedShape, rows, stride, w int, from, base uint64, at func(i, b, h int) int) []vk.Region {
	var regions []vk.Region
	H, bytes := s.cfg.Heads, uint64(w)*4
	for i, b := range sh.chunks {
		n := sh.counts[b]
		for h := range H {
			row := (i*H+h)*stride + rows - n
			regions = append(regions, vk.Region{Src: from + uint64(at(i, b, h))*bytes, Dst: base + uint64(row)*bytes, Size: uint64(n) * bytes})
		}
	}
	return regions
}

// reversed is regions copied the other way.
func reversed(regions []vk.Region) []vk.Region {
	for i, r := range regions {
		regions[i].Src, regions[i].Dst = r.Dst, r.Src
	}
	return regions
}

// recordCalls records calls one after another into cmds with record
// (engine.RecordOwn, or engine.Record for a host's command buffer), gather
// behind the last.
func recordCalls(cmds *vk.Commands, calls []*engine.Call, gather func(*vk.Commands) error,
	record func(*engine.Call, *vk.Commands, func(*vk.Commands) error, func(*vk.Commands) error) error) error {
	for i, call := range calls {
		var after func(*vk.Commands) error
		if i == len(calls)-1 {
			after = gather
		}
		if err := record(call, cmds, nil, after); err != nil {
			return err
		}
	}
	return nil
}
