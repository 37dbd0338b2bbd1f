package kv

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/internal/pages"
	"github.com/vkattn/vkattn/pipelines/dispatch"
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
	// the cache at theirs (SEMANTICS.md §17). Its positions are the
	// cache's: QueryPositions and KeyPositions must be nil.
	RoPE *vkattn.RoPE
	// Window > 0 makes a rolling cache for layers with a sliding window
	// of Window positions (SEMANTICS.md §22): paged, it lets go of the
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
	for _, x := range []struct {
		name string
		n    int
	}{{"B", cfg.B}, {"HKV", cfg.HKV}, {"Capacity", cfg.Capacity}, {"DK", cfg.DK}, {"DV", cfg.DV}, {"PageSize", cfg.PageSize}, {"Pages", cfg.Pages}, {"Window", cfg.Window}} {
		// A rolling cache's Capacity 0 is chosen below.
		rollingCapacity := x.name == "Capacity" && cfg.Window > 0
		if x.n <= 0 && x.name != "PageSize" && x.name != "Pages" && x.name != "Window" && !rollingCapacity {
			return nil, core.Errorf(vkattn.ErrEmpty, "KV cache %s is %d: must be at least 1", x.name, x.n)
		}
		// Every tensor of the cache holds at most 2^31 elements, so
		// no one extent may exceed it (and products of two stay exact).
		if x.n > math.MaxInt32 {
			return nil, core.Errorf(vkattn.ErrTooLarge, "KV cache %s is %d: at most 2^31-1", x.name, x.n)
		}
	}
	if !cfg.DType.ValidKV() {
		return nil, core.Errorf(vkattn.ErrOption, "KV cache of element type %v: want f32, f16, bf16, q8_0 or q4_0", cfg.DType)
	}
	// Calls over the cache would all be refused (the kernels take heads
	// up to MaxHeadWidth): refuse the cache instead.
	if cfg.DK > vkattn.MaxHeadWidth || cfg.DV > vkattn.MaxHeadWidth {
		return nil, core.Errorf(vkattn.ErrTooLarge, "KV cache heads of DK = %d, DV = %d: the attention kernels take widths up to MaxHeadWidth = %d", cfg.DK, cfg.DV, vkattn.MaxHeadWidth)
	}
	// Both quantized types have blocks of 32 (core.Q8Block, core.Q4Block).
	if cfg.DType.Quantized() && (cfg.DK%core.Q8Block != 0 || cfg.DV%core.Q8Block != 0) {
		return nil, core.Errorf(vkattn.ErrShape, "a %v KV cache stores blocks of %d along each head: DK = %d and DV = %d must be multiples of %d", cfg.DType, core.Q8Block, cfg.DK, cfg.DV, core.Q8Block)
	}
	if err := checkRolling(&cfg); err != nil {
		return nil, err
	}
	if cfg.Latent && cfg.DV > cfg.DK {
		return nil, core.Errorf(vkattn.ErrShape, "a latent KV cache's V is the leading DV columns of its keys: DV = %d must be at most DK = %d", cfg.DV, cfg.DK)
	}
	if cfg.Latent && cfg.RoPE != nil {
		return nil, core.Errorf(vkattn.ErrOption, "a latent KV cache takes no RoPE: the cache's RoPE rotates a key's leading columns, which are V's; rotate the latent's trailing rotary columns (and the queries' own) before appending")
	}
	if r := cfg.RoPE; r != nil {
		// A rolling cache's positions go on past its capacity: checked
		// at every position (Dims{}).
		at := vkattn.Dims{S: cfg.Capacity}
		if cfg.Window > 0 {
			at = vkattn.Dims{}
		}
		if err := r.Check(cfg.DK, at); err != nil {
			return nil, err
		}
		if r.QueryPositions != nil || r.KeyPositions != nil {
			return nil, core.Errorf(vkattn.ErrOption, "a KV cache places its tokens itself: its RoPE takes no explicit positions")
		}
		r := *r
		cfg.RoPE = &r // the cache's own copy
	}
	perItem := 0
	if cfg.PageSize > 0 {
		perItem = (cfg.Capacity + cfg.PageSize - 1) / cfg.PageSize
		cfg.Capacity = perItem * cfg.PageSize
		if cfg.Pages == 0 {
			cfg.Pages = cfg.B * perItem
		}
	}
	positions := max(float64(cfg.B)*float64(cfg.Capacity), float64(cfg.Pages)*float64(cfg.PageSize))
	if n := positions * float64(cfg.HKV) * float64(max(cfg.DK, cfg.DV)); n > math.MaxInt32 {
		return nil, core.Errorf(vkattn.ErrTooLarge, "KV cache of %.3g elements per tensor: at most 2^31", n)
	}
	c := &Cache{dev: d, cfg: cfg, lens: make([]int, cfg.B)}
	fail := func(err error) (*Cache, error) {
		c.Close()
		return nil, err
	}
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
				return fail(err)
			}
			continue
		}
		pool, err := alloc(cfg.Pages, cfg.PageSize, x.w)
		if err != nil {
			return fail(err)
		}
		// The kernels see a (B, HKV, Capacity, D) tensor whose batch
		// stride is the pool's page stride: the page table says which page.
		*x.dst = engine.PagedView(pool, cfg.B, cfg.HKV, cfg.Capacity)
	}
	if cfg.Latent {
		// V: the keys' leading columns, which calls read from K's rows.
		if c.v, err = c.k.Columns(0, cfg.DV); err != nil {
			return fail(err)
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
		return fail(engine.DeviceError(err))
	}
	if cfg.PageSize > 0 {
		c.pt = &pageTable{size: cfg.PageSize, pages: cfg.Pages, perItem: perItem}
		if c.pt.table, err = engine.NewTensor(d, [4]int{1, 1, cfg.B, perItem}, vkattn.Float32); err != nil {
			return fail(err)
		}
		c.pool = pages.New(cfg.Pages, cfg.PageSize, cfg.B)
		if err := c.syncPages(engine.WriteInts); err != nil {
			return fail(err)
		}
	}
	if c.lengths, err = engine.NewTensor(d, [4]int{1, 1, 1, 2 * cfg.B}, vkattn.Float32); err != nil {
		return fail(err)
	}
	if r := cfg.RoPE; r != nil && cfg.Window > 0 {
		if err := c.newRollingRoPE(r); err != nil {
			return fail(err)
		}
	} else if r != nil {
		rot := r.RotatedDims(cfg.DK)
		c.rope = &cacheRoPE{r: r}
		if c.rope.table, err = engine.NewTensor(d, [4]int{1, 1, 1, cfg.Capacity * rot}, vkattn.Float32); err != nil {
			return fail(err)
		}
		// A row per position, written a piece at a time: the host holds
		// no copy of the whole table.
		const piece = 4096
		positions := make([]int, 0, piece)
		for p0 := 0; p0 < cfg.Capacity; p0 += piece {
			positions = positions[:0]
			for p := p0; p < min(p0+piece, cfg.Capacity); p++ {
				positions = append(positions, p)
			}
			if err := engine.Buf(c.rope.table).WriteFloat32(uint64(p0*rot), engine.RoPETable(r, cfg.DK, positions)); err != nil {
				return fail(engine.DeviceError(err))
			}
		}
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

// Append adds n tokens to every sequence: k is (B, HKV, n, DK) and v
// (B, HKV, n, DV), row-major, stored after each sequence's last position
// (a latent cache takes k alone: v is nil).
// Past the capacity it is ErrCapacity; bad values are refused as by
// Tensor.Write: non-finite (ErrNonFinite), too large for the cache's type
// or beyond the cache's bound of 2^32, which calls prepared on it were
// checked against (ErrOverflow). Nothing is written when it fails.
func (c *Cache) Append(k, v []float32, n int) error {
	if c == nil {
		return errNoCache
	}
	return c.append(c.everySequence(), k, v, n)
}

// AppendTensors adds the tokens of device tensors to every sequence: k is
// (B, HKV, n, DK) and v (B, HKV, n, DV), e.g. the outputs of projections,
// read through any strides; a latent cache takes k alone (v nil). Dense
// tensors of the cache's element type whose values are within its bound
// are copied on the device, every row with the lengths and the page
// table in one submission that the host does not wait for (calls on the
// cache run after it); float tensors into a q8_0 or q4_0 cache are
// quantized on the device the same way (SEMANTICS.md §8.2), a block past
// the type's range ErrOverflow with nothing appended, as Append refuses
// it (the host waits for that check where the tensors' bounds allow such
// a block); others
// (another type, a view) and the keys of a cache with RoPE (rotated as
// Append rotates them) go through the host once, rounded as Append
// rounds.
func (c *Cache) AppendTensors(k, v *vkattn.Tensor) error {
	if c == nil {
		return errNoCache
	}
	return c.appendTensors((*engine.Tensor)(k), (*engine.Tensor)(v))
}

func (c *Cache) appendTensors(k, v *engine.Tensor) error {
	cfg := c.cfg
	c.mu.Lock()
	err := c.usable()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if cfg.Latent && v != nil {
		return core.Errorf(vkattn.ErrShape, "AppendTensors: a latent KV cache stores the keys alone (V is their leading %d columns): v must be nil", cfg.DV)
	}
	if k == nil || (v == nil && !cfg.Latent) {
		return core.Errorf(vkattn.ErrShape, "AppendTensors of a nil tensor")
	}
	n := k.Shape()[2]
	srcs := c.sources(k, v)
	for i, t := range srcs {
		name, w := [2]string{"k", "v"}[i], [2]int{cfg.DK, cfg.DV}[i]
		if want := [4]int{cfg.B, cfg.HKV, n, w}; t.Shape() != want {
			return core.Errorf(vkattn.ErrShape, "AppendTensors: %s has shape %v, want %v", name, t.Shape(), want)
		}
		if err := engine.CheckInput(c.dev, name, t); err != nil {
			return err
		}
	}
	valid, copyable := true, true
	for _, t := range srcs {
		valid, copyable = valid && t.DType().Valid(), copyable && c.copyable(t)
	}
	if cfg.DType.Quantized() && c.rope == nil && valid {
		return c.appendQuantized(srcs, n)
	}
	if c.rope != nil || !copyable {
		var host [2][]float32
		for i, t := range srcs {
			if host[i], err = t.Download(); err != nil {
				return err
			}
		}
		return c.Append(host[0], host[1], n)
	}
	return c.storeOnce(c.everySequence(), n, false, func(cmds *vk.Commands, i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
		src := srcs[i]
		return engine.EachSpan(cfg.DType, engine.Elements(src), engine.Layout(src).Offset+first*w, engine.Elements(dst), dstElem, rows*w, func(from, to engine.ByteSpan) error {
			return cmds.Copy(engine.Buf(src), from.Off, engine.Buf(dst), to.Off, to.N)
		})
	})
}

// sources are the tensors an append stores: k and v, or a latent cache's
// k alone.
func (c *Cache) sources(k, v *engine.Tensor) []*engine.Tensor {
	if c.cfg.Latent {
		return []*engine.Tensor{k}
	}
	return []*engine.Tensor{k, v}
}

// stored are the cache's tensors that appends write, K then V (a latent
// cache's K alone), each as the kernels see it.
func (c *Cache) stored() []*engine.Tensor {
	if c.cfg.Latent {
		return []*engine.Tensor{c.k}
	}
	return []*engine.Tensor{c.k, c.v}
}

// pools are the buffers' owners of the stored tensors: the page pools
// when paged.
func (c *Cache) pools() []*engine.Tensor {
	var ps []*engine.Tensor
	for _, t := range c.stored() {
		ps = append(ps, engine.Root(t))
	}
	return ps
}

// appendQuantized appends float tensors srcs (k and v, or a latent
// cache's k), n tokens of every sequence, to a q8_0 or q4_0 cache,
// quantized on the device (q8_store.comp) as the host quantizes: recorded
// with the page table and the lengths into one submission that the host
// does not wait for, as a copy is.
func (c *Cache) appendQuantized(srcs []*engine.Tensor, n int) error {
	cfg := c.cfg
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settleLocked()
	saved := c.saveLocked()
	// Each new row's destination element, rows numbered as storeLocked
	// numbers them: sequence by sequence, head by head, token by token.
	dsts := [2][]int{make([]int, cfg.B*cfg.HKV*n), make([]int, cfg.B*cfg.HKV*n)}
	var keep []closer
	// A block whose scale passes float16's range is refused, as Append
	// refuses it: the kernel reports it in status, which the host reads
	// (one wait) unless the sources' bounds already rule it out.
	status, err := engine.NewTensor(c.dev, [4]int{1, 1, 1, 1}, vkattn.Float32)
	if err != nil {
		c.restoreLocked(saved)
		return err
	}
	keep = append(keep, status)
	check := false
	for _, src := range srcs {
		check = check || engine.Bound(src) > cfg.DType.SafeMagnitude()
	}
	cmds, err := engine.VK(c.dev).Later(func(cmds *vk.Commands) error {
		if err := cmds.Fill(engine.Buf(status), 0, 4, 0); err != nil {
			return err
		}
		err := c.storeLocked(c.everySequence(), n, cacheWriter{
			rows: func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
				for r := 0; r < rows; r++ {
					dsts[i][first+r] = dstElem + r*w
				}
				return nil
			},
			ints: func(t *engine.Tensor, off int, xs []int) error { return updateInts(cmds, t, off, xs) },
			page: c.recordPageCopy(cmds),
		})
		if err != nil || n == 0 {
			return err
		}
		for i, src := range srcs {
			dst := c.pools()[i]
			rows, err := engine.NewTensor(c.dev, [4]int{1, 1, 1, len(dsts[i])}, vkattn.Float32)
			if err != nil {
				return err
			}
			keep = append(keep, rows)
			if err := updateInts(cmds, rows, 0, dsts[i]); err != nil {
				return err
			}
			cmds.Barrier()
			st, err := engine.Kernels(c.dev).Q8Store(dispatch.Q8StoreArgs{
				X: engine.Buf(src), XType: src.DType(), XOffset: engine.Layout(src).Offset, XStrides: engine.Layout(src).Strides,
				B: cfg.B, Heads: cfg.HKV, N: n, D: src.Shape()[3],
				Y: engine.Buf(dst), YType: cfg.DType, Scales: engine.Layout(dst).Scales, RowDst: engine.Buf(rows), Status: engine.Buf(status),
			})
			if err != nil {
				return err
			}
			keep = append(keep, st)
			if err := st.Record(cmds); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for _, x := range keep {
			x.Close()
		}
		c.restoreLocked(saved)
		return engine.DeviceError(err)
	}
	c.pending, c.pendingKeep = cmds, keep
	if !check {
		return nil
	}
	if err := cmds.Wait(context.Background()); err != nil {
		return engine.DeviceError(err)
	}
	var word [1]float32
	err = engine.Buf(status).ReadFloat32(0, word[:])
	c.settleLocked()
	if err != nil {
		return engine.DeviceError(err)
	}
	if math.Float32bits(word[0]) == 0 {
		return nil
	}
	// Nothing appended: the lengths and the page table as they were.
	c.restoreLocked(saved)
	if c.pt != nil {
		if err := c.syncPages(engine.WriteInts); err != nil {
			return err
		}
	}
	if err := c.syncLengths(engine.WriteInts); err != nil {
		return err
	}
	return core.Errorf(vkattn.ErrOverflow, "AppendTensors: a block of %d values holds a magnitude past %v's range (its scale would pass float16's largest, 65504): nothing appended, as Append refuses it", core.Q8Block, cfg.DType)
}

// storeOnce is store with every write recorded into one submission (one
// round trip whatever B and HKV): put records each run of rows, and the
// commands write the page table and the lengths. With wait it returns when
// they are done; otherwise they stay pending (device-to-device copies:
// nothing of the host's to keep alive). On failure the cache is as it was.
func (c *Cache) storeOnce(seqs []int, n int, wait bool, put func(cmds *vk.Commands, i int, dst *engine.Tensor, dstElem, first, rows, w int) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.storeOnceLocked(seqs, n, wait, put)
}

// storeOnceLocked is storeOnce with c.mu held.
func (c *Cache) storeOnceLocked(seqs []int, n int, wait bool, put func(cmds *vk.Commands, i int, dst *engine.Tensor, dstElem, first, rows, w int) error) error {
	c.settleLocked()
	saved := c.saveLocked()
	cmds, err := engine.VK(c.dev).Later(func(cmds *vk.Commands) error {
		return c.storeLocked(seqs, n, cacheWriter{
			rows: func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
				return put(cmds, i, dst, dstElem, first, rows, w)
			},
			ints: func(t *engine.Tensor, off int, xs []int) error { return updateInts(cmds, t, off, xs) },
			page: c.recordPageCopy(cmds),
		})
	})
	if err != nil {
		c.restoreLocked(saved)
		return engine.DeviceError(err)
	}
	c.pending = cmds
	if wait {
		err = cmds.Wait(context.Background())
	}
	return engine.DeviceError(err)
}

// settleLocked waits for the pending copies, if any, and frees their
// commands: before the host itself writes what they write (the lengths,
// the page table, rows), and at Close. The caller holds c.mu.
func (c *Cache) settleLocked() {
	c.pending.Close()
	c.pending = nil
	for _, x := range c.pendingKeep {
		x.Close()
	}
	c.pendingKeep = nil
}

// updateInts records xs written as int32 words from element offset off of
// t, in pieces of vkCmdUpdateBuffer's 64 KiB.
func updateInts(cmds *vk.Commands, t *engine.Tensor, off int, xs []int) error {
	const piece = 65536 / 4
	for len(xs) > 0 {
		m := min(len(xs), piece)
		if err := cmds.Update(engine.Buf(t), uint64(4*off), engine.Int32Words(xs[:m])); err != nil {
			return err
		}
		xs, off = xs[m:], off+m
	}
	return nil
}

// copyable reports whether t can be copied into the cache on the device:
// rows one after another, the cache's type, within its bound.
func (c *Cache) copyable(t *engine.Tensor) bool {
	return engine.RowMajor(t) && t.DType() == c.cfg.DType && engine.Bound(t) <= engine.Bound(c.k)
}

// everySequence lists the sequences 0..B-1.
func (c *Cache) everySequence() []int {
	seqs := make([]int, c.cfg.B)
	for b := range seqs {
		seqs[b] = b
	}
	return seqs
}

// AppendTo adds n tokens to sequence b alone: k is (HKV, n, DK) and v
// (HKV, n, DV). Sequences so get different lengths.
func (c *Cache) AppendTo(b int, k, v []float32, n int) error {
	if c == nil {
		return errNoCache
	}
	if b < 0 || b >= c.cfg.B {
		return core.Errorf(vkattn.ErrShape, "sequence %d of a cache of %d", b, c.cfg.B)
	}
	return c.append([]int{b}, k, v, n)
}

// append writes n tokens of each sequence in seqs (k and v hold them in
// that order).
func (c *Cache) append(seqs []int, k, v []float32, n int) error {
	cfg := c.cfg
	if n < 0 {
		return core.Errorf(vkattn.ErrShape, "append of %d tokens", n)
	}
	if cfg.Latent && len(v) > 0 {
		return core.Errorf(vkattn.ErrShape, "a latent KV cache stores the keys alone (V is their leading %d columns): v must be empty, not %d values", cfg.DV, len(v))
	}
	for _, x := range []struct {
		name string
		data []float32
		w    int
	}{{"k", k, cfg.DK}, {"v", v, cfg.DV}}[:len(c.stored())] {
		// In float64: a count of tokens no slice could hold must not
		// wrap around into a small or negative want.
		if want := float64(len(seqs)) * float64(cfg.HKV) * float64(n) * float64(x.w); float64(len(x.data)) != want {
			return core.Errorf(vkattn.ErrShape, "append of %d tokens to %d sequences: %s has %d values, want %.0f (sequences x %d heads x %d tokens x %d)",
				n, len(seqs), x.name, len(x.data), want, cfg.HKV, n, x.w)
		}
	}
	// Under the lock throughout: rotated keys are rotated at the
	// positions they are stored at.
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	c.settleLocked()
	k = c.rotateKeysLocked(seqs, k, n)
	rawK, err := c.encode(c.k, k)
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	var rawV []byte // none in a latent cache
	if !cfg.Latent {
		if rawV, err = c.encode(c.v, v); err != nil {
			return fmt.Errorf("values: %w", err)
		}
	}
	if engine.Buf(c.k).Mapped() && engine.Buf(c.v).Mapped() && engine.Buf(c.lengths).Mapped() {
		return c.storeLocked(seqs, n, cacheWriter{rows: func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
			raw := [2][]byte{rawK, rawV}[i]
			return engine.EachSpan(cfg.DType, len(seqs)*cfg.HKV*n*w, first*w, engine.Elements(dst), dstElem, rows*w, func(from, to engine.ByteSpan) error {
				return engine.Buf(dst).Write(to.Off, raw[from.Off:from.Off+from.N])
			})
		}, ints: engine.WriteInts, page: c.copyPageNow})
	}
	// Unmapped (a discrete GPU): the tokens go through a staging buffer
	// of their own and every run of rows, the page table and the lengths
	// into the cache in one submission, not a round trip each.
	stage, err := engine.VK(c.dev).NewHostBuffer(uint64(len(rawK) + len(rawV)))
	if err != nil {
		return engine.DeviceError(err)
	}
	defer stage.Close()
	if err := stage.Write(0, rawK); err != nil {
		return engine.DeviceError(err)
	}
	if err := stage.Write(uint64(len(rawK)), rawV); err != nil {
		return engine.DeviceError(err)
	}
	return c.storeOnceLocked(seqs, n, true, func(cmds *vk.Commands, i int, dst *engine.Tensor, dstElem, first, rows, w int) error {
		base := [2]uint64{0, uint64(len(rawK))}[i]
		return engine.EachSpan(cfg.DType, len(seqs)*cfg.HKV*n*w, first*w, engine.Elements(dst), dstElem, rows*w, func(from, to engine.ByteSpan) error {
			return cmds.Copy(stage, base+from.Off, engine.Buf(dst), to.Off, to.N)
		})
	})
}

// encode checks tokens to be stored in t, the cache's K or V, and returns
// them as the device stores them. The type's own range comes first
// (float16's and q8_0's and q4_0's lie within the cache's bound), then the cache's
// bound, which calls prepared on the cache were checked against.
func (c *Cache) encode(t *engine.Tensor, data []float32) ([]byte, error) {
	most, finite := engine.Magnitude(data)
	if !finite {
		return nil, core.Errorf(vkattn.ErrNonFinite, "appended data holds NaN or Inf")
	}
	raw, err := engine.EncodeValues(t, data)
	if err != nil {
		return nil, err
	}
	if bound := engine.Bound(t); most > bound {
		return nil, core.Errorf(vkattn.ErrOverflow, "appended data holds |x| = %g, beyond the KV cache's bound %g (2^32): a cache holds keys and values up to it, since calls prepared on the cache were checked against it", most, bound)
	}
	return raw, nil
}

// rotateKeysLocked is k, n new tokens of each sequence of seqs, rotated by
// the cache's RoPE at the positions they will be stored at (k itself
// without RoPE). The caller holds c.mu.
func (c *Cache) rotateKeysLocked(seqs []int, k []float32, n int) []float32 {
	if c.rope == nil {
		return k
	}
	cfg := c.cfg
	r := c.rope.r
	rot := r.RotatedDims(cfg.DK)
	inv := r.InvFreq(rot)
	out := slices.Clone(k)
	cs := make([]float32, rot)
	for i, b := range seqs {
		for t := 0; t < n; t++ {
			core.CosSin(c.lens[b]+t, inv, cs)
			for h := 0; h < cfg.HKV; h++ {
				row := ((i*cfg.HKV+h)*n + t) * cfg.DK
				core.RotatePairs(out[row:row+cfg.DK], rot, r.Style, cs)
			}
		}
	}
	return out
}

// cacheWriter is how store puts things on the device: runs of rows
// (rows), the page table and lengths (ints), and the copy of a shared page
// before its first append (page). Each is done at once (Append on mapped
// memory) or recorded into commands (one submission).
type cacheWriter struct {
	rows func(i int, dst *engine.Tensor, dstElem, first, rows, w int) error
	ints func(t *engine.Tensor, off int, xs []int) error
	page func(from, to int) error
}

// storeLocked reserves n positions in each sequence of seqs (pages when
// paged), has w write them, then counts them. w.rows writes rows [first,
// first+rows) of the new tokens of tensor i (0 K, 1 V: rows of width w,
// numbered sequence by sequence, head by head) at element dstElem of dst;
// the rows of one call are contiguous on the device. Nothing is written
// when a check fails. The caller holds c.mu.
func (c *Cache) storeLocked(seqs []int, n int, w cacheWriter) error {
	cfg := c.cfg
	if err := c.usable(); err != nil {
		return err
	}
	pool := c.pool
	if cfg.Window > 0 && n > 0 {
		// A rolling cache first lets go of the pages below the window of
		// the first new token (SEMANTICS.md §22), in a copy of the pool
		// until the checks pass.
		pool = c.pool.Clone()
		for _, b := range seqs {
			pool.DropBelow(b, c.lens[b]-cfg.Window+1)
		}
	}
	for _, b := range seqs {
		if cfg.Window > 0 {
			start := pool.First(b) * cfg.PageSize
			if held := c.lens[b] + n - start; held > cfg.Capacity {
				return core.Errorf(vkattn.ErrCapacity, "sequence %d of a rolling cache would hold positions %d to %d, %d of at most %d: append fewer tokens at once or raise Capacity", b, start, c.lens[b]+n-1, held, cfg.Capacity)
			}
			if c.lens[b]+n > math.MaxInt32 {
				return core.Errorf(vkattn.ErrCapacity, "sequence %d holds %d tokens: %d more go past position 2^31-1", b, c.lens[b], n)
			}
			continue
		}
		if c.lens[b]+n > cfg.Capacity {
			return core.Errorf(vkattn.ErrCapacity, "sequence %d holds %d of %d positions: %d more do not fit", b, c.lens[b], cfg.Capacity, n)
		}
	}
	if c.pt != nil {
		if need, _ := pool.Plan(seqs, c.lens, n); need > pool.Free() {
			return core.Errorf(vkattn.ErrCapacity, "%d more pages needed, %d of the pool's %d are free", need, pool.Free(), cfg.Pages)
		}
		c.pool = pool
		// Copy on write: a sequence about to write into a page it shares
		// (a fork's last, partly filled page) gets a copy of its own.
		if err := c.pool.Grow(seqs, c.lens, n, w.page); err != nil {
			return err
		}
		if err := c.syncPages(w.ints); err != nil {
			return err
		}
	}
	// Runs of rows that are contiguous on the device: all n per (sequence,
	// head) when contiguous, up to a page boundary when paged.
	dsts := c.pools()
	for i, b := range seqs {
		for h := 0; h < cfg.HKV; h++ {
			src := i*cfg.HKV + h
			for done := 0; done < n; {
				pos := c.lens[b] + done
				run := n - done
				if c.pt != nil {
					run = min(run, cfg.PageSize-pos%cfg.PageSize)
				}
				for t, dst := range dsts {
					width := [2]int{cfg.DK, cfg.DV}[t]
					if err := w.rows(t, dst, c.rowOffset(b, h, pos, width), src*n+done, run, width); err != nil {
						return err
					}
				}
				done += run
			}
		}
	}
	if c.rope != nil && c.rope.lengths != nil {
		for _, b := range seqs {
			if err := c.putRoPERows(b, c.lens[b], c.lens[b]+n, w.ints); err != nil {
				return err
			}
		}
	}
	for _, b := range seqs {
		c.lens[b] += n
	}
	return c.syncLengths(w.ints)
}

// eachPageSpan calls f with the byte ranges of page from and page to in
// the K pool, then in the V pool (q8_0, q4_0: quants and scales each; a
// latent cache has no V pool): a page holds every KV head's rows.
func (c *Cache) eachPageSpan(from, to int, f func(pool *engine.Tensor, src, dst engine.ByteSpan) error) error {
	cfg := c.cfg
	for _, pool := range c.pools() {
		n := cfg.HKV * cfg.PageSize * pool.Shape()[3]
		err := engine.EachSpan(cfg.DType, engine.Elements(pool), from*n, engine.Elements(pool), to*n, n, func(src, dst engine.ByteSpan) error {
			return f(pool, src, dst)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// copyPageNow copies page from to page to in both pools on the device,
// and waits.
func (c *Cache) copyPageNow(from, to int) error {
	return c.eachPageSpan(from, to, func(pool *engine.Tensor, src, dst engine.ByteSpan) error {
		return engine.Buf(pool).CopyTo(engine.Buf(pool), src.Off, dst.Off, src.N)
	})
}

// recordPageCopy is copyPageNow recorded into cmds, with the barrier that
// orders it before the rows written into the copy.
func (c *Cache) recordPageCopy(cmds *vk.Commands) func(from, to int) error {
	return func(from, to int) error {
		err := c.eachPageSpan(from, to, func(pool *engine.Tensor, src, dst engine.ByteSpan) error {
			return cmds.Copy(engine.Buf(pool), src.Off, engine.Buf(pool), dst.Off, src.N)
		})
		if err != nil {
			return err
		}
		cmds.Barrier()
		return nil
	}
}

// cacheState is what an append changes on the host, to put back when its
// submission fails.
type cacheState struct {
	lens []int
	pool *pages.Pool
}

func (c *Cache) saveLocked() cacheState {
	s := cacheState{lens: slices.Clone(c.lens)}
	if c.pool != nil {
		s.pool = c.pool.Clone()
	}
	return s
}

func (c *Cache) restoreLocked(s cacheState) { c.lens, c.pool = s.lens, s.pool }

// rowOffset is the element offset of position pos of sequence b, head h,
// in a tensor of rows of width w.
func (c *Cache) rowOffset(b, h, pos, w int) int {
	cfg := c.cfg
	if c.pt == nil {
		return ((b*cfg.HKV+h)*cfg.Capacity + pos) * w
	}
	page := c.pool.Page(b, pos)
	return ((page*cfg.HKV+h)*cfg.PageSize + pos%cfg.PageSize) * w
}

// syncPages writes the page table to the device with putInts (unused
// entries 0, never read: they lie past every length). The caller holds
// c.mu.
func (c *Cache) syncPages(putInts func(t *engine.Tensor, off int, xs []int) error) error {
	return putInts(c.pt.table, 0, c.pool.Table(c.pt.perItem))
}

// Truncate shortens the sequences to lens (speculative decoding rolls
// back); a length beyond a sequence's current one is ErrCapacity, and in
// a rolling cache a length whose next token's window reaches positions
// already let go is ErrOption (SEMANTICS.md §22).
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

// Attention attends with q, (B, H, L, DK), the queries of each sequence's
// last L tokens, over the cache: query t of sequence b sits at position
// Lengths()[b] - L + t and sees the positions up to it (bottom-right
// causal by construction); Window and ALiBi positions count the same way.
// Options other than KeyLengths, QueryLengths, Causal and
// AlignToKeyLengths, which the cache sets, apply as for Device.Attention;
// over a rolling cache a Window within the cache's is required, and its
// reach checked (SEMANTICS.md §22).
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
// let go (SEMANTICS.md §22). The caller holds c.mu.
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

// checkRolling checks the pages of a cache's configuration and a rolling
// cache's window, and sets a rolling cache's capacity (SEMANTICS.md §22).
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

// checkCacheOptions refuses the options a call over a KV cache sets
// itself.
func checkCacheOptions(opts vkattn.Options) error {
	if opts.KeyLengths != nil || opts.QueryLengths != nil || opts.Causal != vkattn.NotCausal || opts.AlignToKeyLengths {
		return core.Errorf(vkattn.ErrOption, "a KV cache call sets KeyLengths, QueryLengths, Causal and AlignToKeyLengths itself")
	}
	if opts.RoPE != nil {
		return core.Errorf(vkattn.ErrOption, "a KV cache call rotates by the cache's RoPE (kv.Config.RoPE): Options.RoPE must be nil")
	}
	return nil
}

// callRefs are what the cache adds to a call over it.
func (c *Cache) callRefs() *engine.CacheRefs {
	r := &engine.CacheRefs{Lengths: c.lengths}
	if pt := c.pt; pt != nil {
		r.PageTable, r.PageSize, r.Pages, r.PerItem = pt.table, pt.size, pt.pages, pt.perItem
	}
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
