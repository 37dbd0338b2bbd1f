package kv

import (
	"math"
	"slices"
	"sync"

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
	// Options apply as Cache.Attention takes them; with WantLSE, RunLSE
	// returns each new token's log-sum-exp too (for merges). WantWeights
	// is refused.
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
// prepared the first time a step needs its shape (the longest chunk
// rounded up to a power of two up to 64 rows, then to a multiple of 64;
// the view of the cache to a power of two of at least 256 positions, as a
// decode step's): steady-state steps allocate nothing.
type RaggedStep struct {
	mu    sync.Mutex
	cache *Cache
	cfg   RaggedConfig
	cmds  *vk.Commands // the step's own: one submission per Run
	stage *vk.Buffer   // host-visible: K, V and Q in, O out, packed
	at    raggedLayout
	// Host copies of the staging buffer's query and output areas, laid
	// out as the calls read and write them.
	hostQ, hostO, hostLSE []float32
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
	k, v, qDecode, qChunks, oDecode, oChunks, lseDecode, lseChunks, size uint64
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
	if cfg.Options.WantWeights {
		return nil, core.Errorf(vkattn.ErrOption, "a ragged step returns O (and with WantLSE the log-sum-exp): WantWeights is for Cache.Attention")
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
	at := &s.at
	at.v, at.qDecode = c.kvStaging(cfg.Tokens)
	at.qChunks = at.qDecode + uint64(cc.B*cfg.Heads*cc.DK)*4
	at.oDecode = at.qChunks + uint64(cfg.Tokens*cfg.Heads*cc.DK)*4
	at.oChunks = at.oDecode + uint64(cc.B*cfg.Heads*cc.DV)*4
	at.lseDecode = at.oChunks + uint64(cfg.Tokens*cfg.Heads*cc.DV)*4
	at.size = at.lseDecode
	if cfg.Options.WantLSE {
		at.lseChunks = at.lseDecode + uint64(cc.B*cfg.Heads)*4
		at.size = at.lseChunks + uint64(cfg.Tokens*cfg.Heads)*4
		s.hostLSE = make([]float32, (cc.B+cfg.Tokens)*cfg.Heads)
	}
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
	call, err := engine.PrepareOver(c.dev, s.decodeQ, engine.Prefix(c.k, view), engine.Prefix(c.v, view), s.callOptions(c.cfg.B, view), c.pagedRefs(s.decodeLens))
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

// outPlane is one output a step returns, as its calls hold it and as it
// travels: O, rows of DV, or the log-sum-exp, rows of 1.
type outPlane struct {
	width              int
	decodeAt, chunksAt uint64    // the staging buffer's areas
	host               []float32 // the host copy of both areas
	of                 func(*engine.Output) *engine.Tensor
}

// planes are the outputs the step returns: O, and the LSE with WantLSE.
func (s *RaggedStep) planes() []outPlane {
	ps := []outPlane{{s.cache.cfg.DV, s.at.oDecode, s.at.oChunks, s.hostO, func(o *engine.Output) *engine.Tensor { return o.O }}}
	if s.cfg.Options.WantLSE {
		ps = append(ps, outPlane{1, s.at.lseDecode, s.at.lseChunks, s.hostLSE, func(o *engine.Output) *engine.Tensor { return o.LSE }})
	}
	return ps
}
