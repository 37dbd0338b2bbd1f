package kv

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/vk"
)

// RaggedConfig describes a ragged step (Cache.PrepareRagged): the step of
// a server that batches its users' requests, where each sequence brings
// its own number of new tokens.
type RaggedConfig struct {
	// Heads is the number of query heads, a positive multiple of the
	// cache's HKV.
	Heads int
	// Tokens is the most new tokens one step brings, all sequences
	// together: a server's token budget per step.
	Tokens int
	// Chunks is the most sequences that bring more than one token in one
	// step (prompts prefilled chunk by chunk); 0 picks min(B, 4). The
	// step's prefill part holds Chunks items of up to Tokens rows.
	Chunks int
	// Options apply as Cache.Attention takes them; a step returns O only,
	// so WantLSE and WantWeights are refused.
	Options vkattn.Options
}

// RaggedStep is a cache's continuous-batching step, prepared once: Run
// appends each sequence's own number of new tokens (0 allowed) and
// attends with their queries over the cache, every sequence's new tokens
// causally over everything it holds, in one queue submission and one host
// wait (SEMANTICS.md §4.3).
//
// The step's rows are planned by kind: the sequences that bring one token
// run through a decode call (one query row per sequence, the split-K
// kernels where the plan has them) and those that bring more (prompt
// chunks) through a prefill call whose items are those sequences alone
// (Chunks items, the cache's pages reached through a page table of the
// step's own), so a 512-token chunk beside 63 single tokens costs about a
// 512-row prefill and a 63-row decode, not 64 times 512 rows. Both calls
// are recorded into one command buffer behind the appends. A call is
// prepared the first time a step needs its shape (its prefill rows rounded
// up as chunkRows does, the cache view as stepBucket); steady-state steps
// allocate nothing.
type RaggedStep struct {
	mu    sync.Mutex
	cache *Cache
	cfg   RaggedConfig
	cmds  *vk.Commands // the step's own: one submission per Run
	stage *vk.Buffer   // host-visible: K, V and Q in, O out, packed
	at    raggedLayout
	// Host copies of the staging buffer's query and output areas, laid
	// out as the calls read and write them.
	hostQ, hostO []float32
	// The calls' inputs: the decode call's queries (B, H, 1, DK) and the
	// prefill call's (Chunks, H, maxRows, DK), and the lengths (key
	// lengths, then query lengths) and page table each call reads.
	decodeQ, chunkQ                   *engine.Tensor
	decodeLens, chunkLens, chunkTable *engine.Tensor
	maxRows                           int
	decode                            map[int]*engine.Call    // by cache view
	chunk                             map[[2]int]*engine.Call // by rows, cache view
	closed                            bool
}

// raggedLayout is where each part lies in a ragged step's staging buffer
// (bytes): the new tokens' K and V as the cache stores them, packed
// (heads, tokens, d) as Run takes them; the decode call's queries and
// outputs, (B, H, d) as its tensors hold them (one copy each way); the
// chunks' queries and outputs, chunk by chunk, head by head (a region per
// chunk and head, the rows of the prefill call's items).
type raggedLayout struct {
	k, v, qDecode, qChunks, oDecode, oChunks, size uint64
}

// chunkRows is the number of rows the prefill call of a step whose
// longest chunk is n tokens reads: n rounded up to a power of two up to
// 64, then to a multiple of 64 (a prefill tile), at most limit. The rows
// above a shorter chunk are the positions before it, computed and not
// returned.
func chunkRows(n, limit int) int {
	r := 2
	for r < n && r < 64 {
		r *= 2
	}
	if n > 64 {
		r = (n + 63) / 64 * 64
	}
	return min(r, limit)
}

// PrepareRagged prepares a ragged step over the cache (see RaggedStep).
func (c *Cache) PrepareRagged(cfg RaggedConfig) (*RaggedStep, error) {
	if c == nil {
		return nil, errNoCache
	}
	if err := engine.CheckOpen(c.dev); err != nil {
		return nil, err
	}
	cc := c.cfg
	if cfg.Heads <= 0 || cfg.Heads%cc.HKV != 0 {
		return nil, core.Errorf(vkattn.ErrHeads, "ragged step of %d query heads over %d KV heads: want a positive multiple", cfg.Heads, cc.HKV)
	}
	if cfg.Tokens <= 0 || cfg.Chunks < 0 {
		return nil, core.Errorf(vkattn.ErrEmpty, "ragged step of Tokens %d and Chunks %d: want at least one token a step (and Chunks 0 or more)", cfg.Tokens, cfg.Chunks)
	}
	if cfg.Chunks == 0 {
		cfg.Chunks = min(cc.B, 4)
	}
	cfg.Chunks = min(cfg.Chunks, cc.B)
	maxRows := chunkRows(min(cfg.Tokens, cc.Capacity), cc.Capacity)
	for _, n := range []float64{
		float64(cfg.Chunks) * float64(cfg.Heads) * float64(maxRows) * float64(max(cc.DK, cc.DV)),
		float64(cc.B) * float64(cfg.Heads) * float64(max(cc.DK, cc.DV)),
		float64(cfg.Tokens) * float64(cfg.Heads) * float64(max(cc.DK, cc.DV)),
	} {
		if n > math.MaxInt32 {
			return nil, core.Errorf(vkattn.ErrTooLarge, "ragged step of %d query heads, %d tokens and %d chunks: %.3g elements in one tensor, at most 2^31", cfg.Heads, cfg.Tokens, cfg.Chunks, n)
		}
	}
	if cfg.Options.WantLSE || cfg.Options.WantWeights {
		return nil, core.Errorf(vkattn.ErrOption, "a ragged step returns O only: WantLSE and WantWeights are for Cache.Attention")
	}
	if err := c.checkOptions(cfg.Options); err != nil {
		return nil, err
	}
	s := &RaggedStep{cache: c, cfg: cfg, maxRows: maxRows, decode: map[int]*engine.Call{}, chunk: map[[2]int]*engine.Call{}}
	fail := func(err error) (*RaggedStep, error) {
		s.Close()
		return nil, err
	}
	d := c.dev
	var err error
	zeros := func(shape [4]int) (*engine.Tensor, error) {
		return engine.UploadBounded(d, shape[:], make([]float32, shape[0]*shape[1]*shape[2]*shape[3]), vkattn.Float32, engine.WriteHeadroom)
	}
	if s.decodeQ, err = zeros([4]int{cc.B, cfg.Heads, 1, cc.DK}); err != nil {
		return fail(err)
	}
	if s.chunkQ, err = zeros([4]int{cfg.Chunks, cfg.Heads, maxRows, cc.DK}); err != nil {
		return fail(err)
	}
	perItem := 1 // a contiguous cache is read as pages of Capacity positions, one a sequence
	if c.pt != nil {
		perItem = c.pt.perItem
	}
	for _, x := range []struct {
		t *(*engine.Tensor)
		n int
	}{{&s.decodeLens, 2 * cc.B}, {&s.chunkLens, 2 * cfg.Chunks}, {&s.chunkTable, cfg.Chunks * perItem}} {
		if *x.t, err = engine.NewTensor(d, [4]int{1, 1, 1, x.n}, vkattn.Float32); err != nil {
			return fail(err)
		}
	}
	align := func(n uint64) uint64 { return (n + 15) &^ 15 }
	at := &s.at
	at.v = align(uint64(cc.DType.StorageBytes(cfg.Tokens * cc.HKV * cc.DK)))
	vRow := cc.DV
	if cc.Latent {
		vRow = 0 // V is the keys' leading columns
	}
	at.qDecode = at.v + align(uint64(cc.DType.StorageBytes(cfg.Tokens*cc.HKV*vRow)))
	at.qChunks = at.qDecode + uint64(cc.B*cfg.Heads*cc.DK)*4
	at.oDecode = at.qChunks + uint64(cfg.Tokens*cfg.Heads*cc.DK)*4
	at.oChunks = at.oDecode + uint64(cc.B*cfg.Heads*cc.DV)*4
	at.size = at.oChunks + uint64(cfg.Tokens*cfg.Heads*cc.DV)*4
	s.hostQ = make([]float32, (cc.B+cfg.Tokens)*cfg.Heads*cc.DK)
	s.hostO = make([]float32, (cc.B+cfg.Tokens)*cfg.Heads*cc.DV)
	vd := engine.VK(d)
	if s.stage, err = vd.NewHostBuffer(at.size); err != nil {
		return fail(engine.DeviceError(err))
	}
	if s.cmds, err = vd.NewCommands(2); err != nil {
		return fail(engine.DeviceError(err))
	}
	// The first calls, so that options the calls refuse fail here.
	view := stepBucket(1, cc.Capacity, cc.PageSize)
	if _, err := s.decodeCall(view); err != nil {
		return fail(err)
	}
	if _, err := s.chunkCall(chunkRows(2, maxRows), view); err != nil {
		return fail(err)
	}
	return s, nil
}

// callOptions are the step's options for a call that reads lengths of
// the step's own: the key lengths the planner sees are the view's (the
// kernels read the step's current ones).
func (s *RaggedStep) callOptions(items, view int) vkattn.Options {
	opts := s.cfg.Options
	opts.KeyLengths = slices.Repeat([]int{view}, items)
	opts.Causal = vkattn.CausalBottomRight
	opts.AlignToKeyLengths = true
	return opts
}

// decodeCall is the call of one query row per sequence over the first
// view positions of every sequence, prepared the first time. The caller
// holds s.mu.
func (s *RaggedStep) decodeCall(view int) (*engine.Call, error) {
	if call, ok := s.decode[view]; ok {
		return call, nil
	}
	c := s.cache
	refs := &engine.CacheRefs{Lengths: s.decodeLens}
	if pt := c.pt; pt != nil {
		refs.PageTable, refs.PageSize, refs.Pages, refs.PerItem = pt.table, pt.size, pt.pages, pt.perItem
	}
	call, err := engine.PrepareOver(c.dev, s.decodeQ, engine.Prefix(c.k, view), engine.Prefix(c.v, view), s.callOptions(c.cfg.B, view), refs)
	if err != nil {
		return nil, err
	}
	s.decode[view] = call
	return call, nil
}

// chunkCall is the prefill call of rows query rows for each of Chunks
// items over the first view positions of the sequences the step's page
// table names, prepared the first time. The caller holds s.mu.
func (s *RaggedStep) chunkCall(rows, view int) (*engine.Call, error) {
	key := [2]int{rows, view}
	if call, ok := s.chunk[key]; ok {
		return call, nil
	}
	c := s.cache
	cc := c.cfg
	refs := &engine.CacheRefs{Lengths: s.chunkLens, PageTable: s.chunkTable, PageSize: cc.Capacity, Pages: cc.B, PerItem: 1}
	if pt := c.pt; pt != nil {
		refs.PageSize, refs.Pages, refs.PerItem = pt.size, pt.pages, pt.perItem
	}
	n := s.cfg.Chunks
	k := engine.PagedView(c.k, n, cc.HKV, view)
	v := engine.PagedView(c.v, n, cc.HKV, view)
	call, err := engine.PrepareOver(c.dev, engine.Prefix(s.chunkQ, rows), k, v, s.callOptions(n, view), refs)
	if err != nil {
		return nil, err
	}
	s.chunk[key] = call
	return call, nil
}

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
	}{{"k", k, cc.HKV * sh.total * cc.DK}, {"v", v, vWant}, {"q", q, H * sh.total * cc.DK}, {"o", o, H * sh.total * cc.DV}} {
		if len(x.data) != x.want {
			return 0, core.Errorf(vkattn.ErrShape, "ragged step of %d tokens: %s has %d values, want %d", sh.total, x.name, len(x.data), x.want)
		}
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
	k, q = c.rotateTokensLocked(sh, k, cc.HKV), c.rotateTokensLocked(sh, q, H)
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
	if most, finite := engine.Magnitude(q); !finite {
		return 0, core.Errorf(vkattn.ErrNonFinite, "ragged step: q holds NaN or Inf")
	} else if bound := float64(engine.WriteHeadroom); most > bound {
		return 0, core.Errorf(vkattn.ErrOverflow, "ragged step: q holds |x| = %g, beyond the %g the step's calls were checked for", most, bound)
	}
	qDecode, qChunks := s.packQueries(sh, q)
	kept := c.keptAfterLocked(counts)
	view := stepBucket(slices.Max(kept), cc.Capacity, cc.PageSize)
	var calls []*engine.Call
	var rows int
	if len(sh.chunks) > 0 {
		rows = chunkRows(sh.longest, s.maxRows)
		call, err := s.chunkCall(rows, view)
		if err != nil {
			return 0, err
		}
		calls = append(calls, call)
	}
	if len(sh.decode) > 0 {
		call, err := s.decodeCall(view)
		if err != nil {
			return 0, err
		}
		calls = append(calls, call)
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
	return t, engine.DeviceError(s.unpackOutputs(sh, o))
}

// packQueries lays q's rows out as the calls read them: the decode
// sequences' at (b, h) of a (B, H, DK) area, the chunks' chunk by chunk,
// head by head. It returns the two areas (empty where no sequence goes).
func (s *RaggedStep) packQueries(sh raggedShape, q []float32) (decode, chunks []float32) {
	cc := s.cache.cfg
	H, dk := s.cfg.Heads, cc.DK
	if len(sh.decode) > 0 {
		decode = s.hostQ[:cc.B*H*dk]
	}
	chunks = s.hostQ[cc.B*H*dk:][:(sh.total-len(sh.decode))*H*dk]
	for h := range H {
		for _, b := range sh.decode {
			at := (h*sh.total + sh.first[b]) * dk
			copy(decode[(b*H+h)*dk:], q[at:at+dk])
		}
		for i, b := range sh.chunks {
			n := sh.counts[b]
			at := (h*sh.total + sh.first[b]) * dk
			copy(chunks[(sh.chunkAt[i]+h*n)*dk:], q[at:at+n*dk])
		}
	}
	return decode, chunks
}

// unpackOutputs reads the outputs back from the staging buffer into o,
// packed as Run returns them.
func (s *RaggedStep) unpackOutputs(sh raggedShape, o []float32) error {
	cc := s.cache.cfg
	H, dv := s.cfg.Heads, cc.DV
	decode := s.hostO[:cc.B*H*dv]
	chunks := s.hostO[cc.B*H*dv:][:(sh.total-len(sh.decode))*H*dv]
	if len(sh.decode) > 0 {
		if err := s.stage.ReadFloat32(s.at.oDecode/4, decode); err != nil {
			return err
		}
	}
	if len(chunks) > 0 {
		if err := s.stage.ReadFloat32(s.at.oChunks/4, chunks); err != nil {
			return err
		}
	}
	for h := range H {
		for _, b := range sh.decode {
			at := (h*sh.total + sh.first[b]) * dv
			copy(o[at:at+dv], decode[(b*H+h)*dv:])
		}
		for i, b := range sh.chunks {
			n := sh.counts[b]
			at := (h*sh.total + sh.first[b]) * dv
			copy(o[at:at+n*dv], chunks[(sh.chunkAt[i]+h*n)*dv:])
		}
	}
	return nil
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
	// The appends, one store per distinct count: storeLocked numbers the
	// rows of its sequences sequence by sequence, head by head.
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
		put := func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
			seq, h, t := first/n/cc.HKV, first/n%cc.HKV, first%n
			from := (h*sh.total + sh.first[seqs[seq]] + t) * w
			base := [2]uint64{s.at.k, s.at.v}[i]
			return engine.EachSpan(cc.DType, cc.HKV*sh.total*w, from, engine.Elements(dst), dstElem, rows*w, func(src, to engine.ByteSpan) error {
				return cmds.Copy(s.stage, base+src.Off, engine.Buf(dst), to.Off, to.N)
			})
		}
		if err := c.storeLocked(seqs, n, cacheWriter{rows: put, ints: putInts, page: page}); err != nil {
			return err
		}
	}
	// Each call's lengths and (the prefill's) page table: the sequences
	// of the other kind read as empty, their rows as padding.
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
		if err := putInts(x.t, 0, x.xs); err != nil {
			return engine.DeviceError(err)
		}
	}
	// The queries into each call's: the decode sequences' in one copy,
	// each chunk's a region per head (its item's last rows).
	dk, dv, H := uint64(cc.DK), uint64(cc.DV), s.cfg.Heads
	if len(sh.decode) > 0 {
		if err := cmds.Copy(s.stage, s.at.qDecode, engine.Buf(s.decodeQ), 0, uint64(cc.B*H)*dk*4); err != nil {
			return engine.DeviceError(err)
		}
	}
	chunkRegions := func(area, width uint64, stride int) []vk.Region {
		var regions []vk.Region
		for i, b := range sh.chunks {
			n := sh.counts[b]
			for h := range H {
				row := (i*H+h)*stride + rows - n
				regions = append(regions, vk.Region{Src: area + uint64(sh.chunkAt[i]+h*n)*width*4, Dst: uint64(row) * width * 4, Size: uint64(n) * width * 4})
			}
		}
		return regions
	}
	if err := cmds.CopyRegions(s.stage, engine.Buf(s.chunkQ), chunkRegions(s.at.qChunks, dk, s.maxRows)); err != nil {
		return engine.DeviceError(err)
	}
	// The outputs back: the chunk call's first, the decode call's (the
	// last call, if any) after.
	gather := func(cmds *vk.Commands) error {
		for i, call := range calls {
			out := call.Output().O
			base := uint64(engine.Layout(out).Offset) * 4
			if i == len(calls)-1 && len(sh.decode) > 0 {
				if err := cmds.Copy(engine.Buf(out), base, s.stage, s.at.oDecode, uint64(cc.B*H)*dv*4); err != nil {
					return err
				}
				continue
			}
			regions := chunkRegions(s.at.oChunks, dv, rows)
			for j := range regions { // the other way: from the call's rows into the area
				regions[j].Src, regions[j].Dst = base+regions[j].Dst, regions[j].Src
			}
			if err := cmds.CopyRegions(engine.Buf(out), s.stage, regions); err != nil {
				return err
			}
		}
		return nil
	}
	for i, call := range calls {
		var after func(*vk.Commands) error
		if i == len(calls)-1 {
			after = gather
		}
		if err := engine.RecordOwn(call, cmds, nil, after); err != nil {
			return err
		}
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

// rotateTokensLocked is x, a step's packed rows of heads heads, rotated
// by the cache's RoPE at each token's position (token t of sequence b at
// Lengths()[b] + t, before the append); x itself without RoPE. The caller
// holds c.mu.
func (c *Cache) rotateTokensLocked(sh raggedShape, x []float32, heads int) []float32 {
	if c.rope == nil {
		return x
	}
	dk := c.cfg.DK
	r := c.rope.r
	rot := r.RotatedDims(dk)
	inv := r.InvFreq(rot)
	out := slices.Clone(x)
	cs := make([]float32, rot)
	for b, n := range sh.counts {
		for t := range n {
			core.CosSin(c.lens[b]+t, inv, cs)
			for h := range heads {
				row := (h*sh.total + sh.first[b] + t) * dk
				core.RotatePairs(out[row:row+dk], rot, r.Style, cs)
			}
		}
	}
	return out
}

// RaggedPlan is what a ragged step of given counts launches: the prefill
// call of its chunks (nil without one) and the decode call of its single
// tokens (nil without one).
type RaggedPlan struct {
	// Chunk plans ChunkSequences items of ChunkRows query rows each:
	// every sequence bringing more than one token, its tokens the last
	// rows of its item.
	Chunk                     *vkattn.Plan
	ChunkSequences, ChunkRows int
	// Decode plans one query row for each of the cache's sequences, of
	// which DecodeSequences bring one token (the others' rows are padding).
	Decode          *vkattn.Plan
	DecodeSequences int
}

// String says what the step runs, a line per call.
func (p RaggedPlan) String() string {
	s := ""
	if p.Chunk != nil {
		s += fmt.Sprintf("prefill part: %d sequence(s) of more than one token, %d rows each: %s\n", p.ChunkSequences, p.ChunkRows, p.Chunk)
	}
	if p.Decode != nil {
		s += fmt.Sprintf("decode part: %d sequence(s) of one token: %s\n", p.DecodeSequences, p.Decode)
	}
	if s == "" {
		s = "no tokens: nothing runs\n"
	}
	return s
}

// Plan is the plan of a step of counts as Run would launch it now, with
// the sequences' current lengths (preparing its calls if need be).
func (s *RaggedStep) Plan(counts []int) (RaggedPlan, error) {
	if err := s.lock(); err != nil {
		return RaggedPlan{}, err
	}
	defer s.mu.Unlock()
	sh, err := s.shape(counts)
	if err != nil {
		return RaggedPlan{}, err
	}
	c := s.cache
	c.mu.Lock()
	err = c.usable()
	kept := c.keptAfterLocked(counts)
	c.mu.Unlock()
	if err != nil || sh.total == 0 {
		return RaggedPlan{}, err
	}
	view := stepBucket(slices.Max(kept), c.cfg.Capacity, c.cfg.PageSize)
	var p RaggedPlan
	if len(sh.chunks) > 0 {
		p.ChunkSequences, p.ChunkRows = len(sh.chunks), chunkRows(sh.longest, s.maxRows)
		call, err := s.chunkCall(p.ChunkRows, view)
		if err != nil {
			return RaggedPlan{}, err
		}
		plan := call.Output().Plan.Plan
		p.Chunk = &plan
	}
	if len(sh.decode) > 0 {
		p.DecodeSequences = len(sh.decode)
		call, err := s.decodeCall(view)
		if err != nil {
			return RaggedPlan{}, err
		}
		plan := call.Output().Plan.Plan
		p.Decode = &plan
	}
	return p, nil
}

// lock takes the step for a use; a nil or closed step is ErrClosed. The
// caller unlocks s.mu.
func (s *RaggedStep) lock() error {
	if s == nil {
		return core.Errorf(vkattn.ErrClosed, "no ragged step: the *RaggedStep is nil")
	}
	return lockOpen(&s.mu, &s.closed, "ragged step used")
}

// Close frees the step's calls, tensors, commands and staging buffer
// (waiting for a step still in flight); the cache stays.
func (s *RaggedStep) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cmds.Close()
	for _, call := range s.decode {
		call.Close()
	}
	for _, call := range s.chunk {
		call.Close()
	}
	s.decode, s.chunk = nil, nil
	engine.CloseTensors(s.decodeQ, s.chunkQ, s.decodeLens, s.chunkLens, s.chunkTable)
	s.stage.Close()
}
