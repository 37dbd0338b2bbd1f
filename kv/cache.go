package kv

import (
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/internal/pages"
	"github.com/vkattn/vkattn/vk"
)

// Config describes a KV cache: B sequences, each of up to Capacity
// positions of HKV key/value heads of widths DK and DV, stored as DType.
type Config struct {
	B, HKV, Capacity, DK, DV int
	DType                    vkattn.DType // of K and V (zero: float32)
	// PageSize > 0 stores K and V paged, as paged attention does: a pool of
	// Pages pages of PageSize positions (0: enough for every sequence to
	// reach Capacity), handed to sequences as they grow, with a page table
	// per sequence the kernels read directly (no gather copy). Capacity
	// is rounded up to whole pages.
	PageSize, Pages int
	// RoPE, if not nil, rotates keys as they are appended (each key once,
	// at its position in its sequence) and the queries of every call over
	// the cache at theirs (SEMANTICS.md §5). Its positions are the
	// cache's: QueryPositions and KeyPositions must be nil.
	RoPE *vkattn.RoPE
	// Window > 0 makes a rolling cache for layers with a sliding window
	// of Window positions (SEMANTICS.md §4.4): paged, it lets go of the
	// pages no window reaches any more, so its memory follows Window, not
	// the sequences' lengths. Capacity then bounds the positions a
	// sequence holds at once (0: Window + PageSize - 1, what a decode of
	// one token at a time needs), and calls over it need Options.Window
	// with Left in [0, Window-1]. 0 keeps every position.
	Window int
	// Latent makes a latent cache, multi-head latent attention's
	// (SEMANTICS.md §2): it stores rows of DK alone (DeepSeek V2/V3: 576,
	// the 512-wide latent and its 64 rotary columns), and V is their
	// leading DV <= DK columns (512), read in place by every call over the
	// cache (Tensor.Columns), with no storage of its own. Appends take the
	// keys alone: v is nil (empty). RoPE must be nil: the cache rotates
	// leading columns, and a latent's rotary columns are its trailing
	// ones, so the caller rotates them (and the queries' own) before
	// appending.
	Latent bool
}

// pageTable is a paged cache's page table on the device: perItem entries
// per sequence, pages of size positions, pages pages in the pool.
type pageTable struct {
	size, pages, perItem int
	table                *engine.Tensor // int32 (B, perItem)
}

// Cache holds the keys and values of B sequences on the device for
// decoding: append each step's tokens, attend with their queries over
// everything so far. Storage is contiguous: K is (B, HKV, Capacity, DK)
// and V (B, HKV, Capacity, DV), sequence b filling its first Lengths()[b]
// positions (a latent cache's V is K's leading columns). Appending writes only the new positions; a prepared call
// reads the current lengths each time it runs, so a decode step is one
// Write of the query and one Run, with no allocation.
//
// A Cache is safe for concurrent use; a prepared call must not run while
// an append to its cache is under way.
type Cache struct {
	dev  *engine.Device
	cfg  Config
	k, v *engine.Tensor // (B, HKV, Capacity, D); views of the page pools when paged; v a view of k's columns when latent
	// Paged: the table on the device and the page allocator (forked
	// sequences share pages, copied on write).
	pt   *pageTable
	pool *pages.Pool
	// lengths on the device as the kernels read them: key lengths [B]
	// (the sequence lengths), then query lengths [B], all Capacity: no
	// row of any call (L <= every length <= Capacity) is padding.
	lengths *engine.Tensor
	mu      sync.Mutex
	lens    []int
	closed  bool
	// pending are an AppendTensors' copies still in flight: device work
	// submitted later runs after them; the host waits for them only
	// before it writes the cache itself.
	pending *vk.Commands
	// pendingKeep are what pending's kernels read (a quantization's
	// steps and row tables), freed when it is settled.
	pendingKeep []closer
	rope        *cacheRoPE // nil without RoPE
}

// New allocates an empty cache on d (every sequence of length 0), zeroed
// on the device: the host holds no copy of it. A cache the device's heap
// (or vkattn.Config.MemoryLimit) cannot hold, or heads wider than
// vkattn.MaxHeadWidth, are ErrTooLarge.
func New(dev *vkattn.Device, cfg Config) (*Cache, error) {
	d := (*engine.Device)(dev)
	if err := engine.CheckOpen(d); err != nil {
		return nil, err
	}
	perItem, err := checkConfig(&cfg)
	if err != nil {
		return nil, err
	}
	c := &Cache{dev: d, cfg: cfg, lens: make([]int, cfg.B)}
	fail := func(err error) (*Cache, error) {
		c.Close()
		return nil, err
	}
	if err := c.allocate(perItem); err != nil {
		return fail(err)
	}
	if err := c.newRoPE(); err != nil {
		return fail(err)
	}
	// Key lengths 0; query lengths Capacity, so that no row is padding.
	if err := engine.WriteInts(c.lengths, cfg.B, slices.Repeat([]int{cfg.Capacity}, cfg.B)); err != nil {
		return fail(err)
	}
	if err := c.syncLengths(engine.WriteInts); err != nil {
		return fail(err)
	}
	return c, nil
}

// checkConfig refuses a configuration no cache can have and completes
// cfg: a paged cache's Capacity rounded up to whole pages and its pool
// (Pages 0: enough for every sequence), a rolling cache's Capacity, the
// cache's own copy of its RoPE. It returns a paged cache's page-table
// entries per sequence (0 when contiguous).
func checkConfig(cfg *Config) (perItem int, err error) {
	for _, x := range []struct {
		name string
		n    int
	}{{"B", cfg.B}, {"HKV", cfg.HKV}, {"Capacity", cfg.Capacity}, {"DK", cfg.DK}, {"DV", cfg.DV}, {"PageSize", cfg.PageSize}, {"Pages", cfg.Pages}, {"Window", cfg.Window}} {
		// A rolling cache's Capacity 0 is chosen below.
		rollingCapacity := x.name == "Capacity" && cfg.Window > 0
		if x.n <= 0 && x.name != "PageSize" && x.name != "Pages" && x.name != "Window" && !rollingCapacity {
			return 0, core.Errorf(vkattn.ErrEmpty, "KV cache %s is %d: must be at least 1", x.name, x.n)
		}
		// Every tensor of the cache holds at most 2^31 elements, so
		// no one extent may exceed it (and products of two stay exact).
		if x.n > math.MaxInt32 {
			return 0, core.Errorf(vkattn.ErrTooLarge, "KV cache %s is %d: at most 2^31-1", x.name, x.n)
		}
	}
	if !cfg.DType.ValidKV() {
		return 0, core.Errorf(vkattn.ErrOption, "KV cache of element type %v: want f32, f16, bf16 or %s", cfg.DType, strings.Join(core.QuantNames(), ", "))
	}
	// Calls over the cache would all be refused (the kernels take heads
	// up to MaxHeadWidth): refuse the cache instead.
	if cfg.DK > vkattn.MaxHeadWidth || cfg.DV > vkattn.MaxHeadWidth {
		return 0, core.Errorf(vkattn.ErrTooLarge, "KV cache heads of DK = %d, DV = %d: the attention kernels take widths up to MaxHeadWidth = %d", cfg.DK, cfg.DV, vkattn.MaxHeadWidth)
	}
	if q, ok := cfg.DType.Quant(); ok && (cfg.DK%q.Block != 0 || cfg.DV%q.Block != 0) {
		return 0, core.Errorf(vkattn.ErrShape, "a %v KV cache stores blocks of %d along each head: DK = %d and DV = %d must be multiples of %d", cfg.DType, q.Block, cfg.DK, cfg.DV, q.Block)
	}
	if err := checkRolling(cfg); err != nil {
		return 0, err
	}
	if cfg.Latent && cfg.DV > cfg.DK {
		return 0, core.Errorf(vkattn.ErrShape, "a latent KV cache's V is the leading DV columns of its keys: DV = %d must be at most DK = %d", cfg.DV, cfg.DK)
	}
	if cfg.Latent && cfg.RoPE != nil {
		return 0, core.Errorf(vkattn.ErrOption, "a latent KV cache takes no RoPE: the cache's RoPE rotates a key's leading columns, which are V's; rotate the latent's trailing rotary columns (and the queries' own) before appending")
	}
	if r := cfg.RoPE; r != nil {
		// A rolling cache's positions go on past its capacity: checked
		// at every position (Dims{}).
		at := vkattn.Dims{S: cfg.Capacity}
		if cfg.Window > 0 {
			at = vkattn.Dims{}
		}
		if err := r.Check(cfg.DK, at); err != nil {
			return 0, err
		}
		if r.QueryPositions != nil || r.KeyPositions != nil {
			return 0, core.Errorf(vkattn.ErrOption, "a KV cache places its tokens itself: its RoPE takes no explicit positions")
		}
		r := *r
		cfg.RoPE = &r // the cache's own copy
	}
	if cfg.PageSize > 0 {
		perItem = (cfg.Capacity + cfg.PageSize - 1) / cfg.PageSize
		cfg.Capacity = perItem * cfg.PageSize
		if cfg.Pages == 0 {
			cfg.Pages = cfg.B * perItem
		}
	}
	positions := max(float64(cfg.B)*float64(cfg.Capacity), float64(cfg.Pages)*float64(cfg.PageSize))
	if n := positions * float64(cfg.HKV) * float64(max(cfg.DK, cfg.DV)); n > math.MaxInt32 {
		return 0, core.Errorf(vkattn.ErrTooLarge, "KV cache of %.3g elements per tensor: at most 2^31", n)
	}
	return perItem, nil
}

// allocate makes the cache's storage on the device, zeroed there, and
// (paged) its page table and pool of perItem pages a sequence, and the
// lengths the kernels read.
func (c *Cache) allocate(perItem int) error {
	cfg := c.cfg
	d := c.dev
	var err error
	// Allocated, not uploaded: the host never holds a copy of the cache,
	// and one the heap cannot hold is refused before anything is written.
	// The bound is Upload's, as if zeros had been uploaded.
	alloc := func(b, n, w int) (*engine.Tensor, error) {
		t, err := engine.NewTensor(d, [4]int{b, cfg.HKV, n, w}, cfg.DType)
		if err == nil {
			engine.SetBound(t, engine.WriteHeadroom)
		}
		return t, err
	}
	stored := []struct {
		dst **engine.Tensor
		w   int
	}{{&c.k, cfg.DK}, {&c.v, cfg.DV}}
	if cfg.Latent {
		stored = stored[:1]
	}
	for _, x := range stored {
		if cfg.PageSize == 0 {
			if *x.dst, err = alloc(cfg.B, cfg.Capacity, x.w); err != nil {
				return err
			}
			continue
		}
		pool, err := alloc(cfg.Pages, cfg.PageSize, x.w)
		if err != nil {
			return err
		}
		// The kernels see a (B, HKV, Capacity, D) tensor whose batch
		// stride is the pool's page stride: the page table says which page.
		*x.dst = engine.PagedView(pool, cfg.B, cfg.HKV, cfg.Capacity)
	}
	if cfg.Latent {
		// V: the keys' leading columns, which calls read from K's rows.
		if c.v, err = c.k.Columns(0, cfg.DV); err != nil {
			return err
		}
	}
	// Zeros, not garbage: the kernels load a few positions past a
	// sequence's end (masked, but 0 * NaN would not be 0). Set on the
	// device; all-zero bytes are zeros in every cache type (float16,
	// bfloat16, q8_0 quants and their float16 scales; q4_0's read as
	// (0 - 8) * 0 = -0).
	err = engine.VK(d).Once(func(cmds *vk.Commands) error {
		for _, t := range c.pools() {
			if err := cmds.Fill(engine.Buf(t), 0, engine.Buf(t).Size(), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return engine.DeviceError(err)
	}
	if cfg.PageSize > 0 {
		c.pt = &pageTable{size: cfg.PageSize, pages: cfg.Pages, perItem: perItem}
		if c.pt.table, err = engine.NewTensor(d, [4]int{1, 1, cfg.B, perItem}, vkattn.Float32); err != nil {
			return err
		}
		c.pool = pages.New(cfg.Pages, cfg.PageSize, cfg.B)
		if err := c.syncPages(engine.WriteInts); err != nil {
			return err
		}
	}
	if c.lengths, err = engine.NewTensor(d, [4]int{1, 1, 1, 2 * cfg.B}, vkattn.Float32); err != nil {
		return err
	}
	return nil
}

// newRoPE makes the tables of a cache with RoPE: a rolling cache's (rows
// that follow its window) or a row per position of the capacity, written
// a piece at a time (the host holds no copy of the whole table).
func (c *Cache) newRoPE() error {
	cfg := c.cfg
	r := cfg.RoPE
	switch {
	case r == nil:
		return nil
	case cfg.Window > 0:
		return c.newRollingRoPE(r)
	}
	rot := r.RotatedDims(cfg.DK)
	c.rope = &cacheRoPE{r: r}
	var err error
	if c.rope.table, err = engine.NewTensor(c.dev, [4]int{1, 1, 1, cfg.Capacity * rot}, vkattn.Float32); err != nil {
		return err
	}
	const piece = 4096
	positions := make([]int, 0, piece)
	for p0 := 0; p0 < cfg.Capacity; p0 += piece {
		positions = positions[:0]
		for p := p0; p < min(p0+piece, cfg.Capacity); p++ {
			positions = append(positions, p)
		}
		if err := engine.Buf(c.rope.table).WriteFloat32(uint64(p0*rot), engine.RoPETable(r, cfg.DK, positions)); err != nil {
			return engine.DeviceError(err)
		}
	}
	return nil
}

// Config is the cache's configuration.
func (c *Cache) Config() Config {
	if c == nil {
		return Config{}
	}
	return c.cfg
}

// Lengths are the current sequence lengths.
func (c *Cache) Lengths() []int {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lens)
}

// usable is ErrClosed once the cache or its device is closed. The caller
// holds c.mu.
func (c *Cache) usable() error {
	if c.closed {
		return core.Errorf(vkattn.ErrClosed, "KV cache used after Close")
	}
	return engine.CheckOpen(c.dev)
}

// errNoCache refuses the methods of a nil *Cache.
var errNoCache = core.Errorf(vkattn.ErrClosed, "no KV cache: the *Cache is nil")

// Close frees the cache; close the calls prepared on it first.
func (c *Cache) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.settleLocked()
	engine.CloseTensors(c.k, c.v, c.lengths)
	if c.rope != nil {
		engine.CloseTensors(c.rope.table, c.rope.lengths)
	}
	if c.pt != nil {
		c.pt.table.Close()
	}
}

// closer is what a cache keeps alive for work in flight.
type closer interface{ Close() }
