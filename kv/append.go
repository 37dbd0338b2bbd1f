package kv

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/internal/pages"
	"github.com/vkattn/vkattn/pipelines/dispatch"
	"github.com/vkattn/vkattn/vk"
)

// Appends: tokens from the host (quantized or rounded there, keys rotated
// with RoPE) or from device tensors (copied, or quantized on the device),
// written at each sequence's positions in one submission; the cache's
// state saved before and restored when an append is refused.

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
// quantized on the device the same way (SEMANTICS.md §9.2), a block past
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
		return copyRows(cmds, srcs[i], dst, dstElem, first, rows, w)
	})
}

// copyRows records the copy of rows rows of w elements from row first of
// src, a tensor of the cache's type whose rows lie one after another,
// into dst from element dstElem: a device append's rows.
func copyRows(cmds *vk.Commands, src, dst *engine.Tensor, dstElem, first, rows, w int) error {
	return engine.EachSpan(src.DType(), engine.Elements(src), engine.Layout(src).Offset+first*w, engine.Elements(dst), dstElem, rows*w, func(from, to engine.ByteSpan) error {
		return cmds.Copy(engine.Buf(src), from.Off, engine.Buf(dst), to.Off, to.N)
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
	q, _ := cfg.DType.Quant()
	return core.Errorf(vkattn.ErrOverflow, "AppendTensors: a block of %d values holds a magnitude past %v's range (its scale would pass float16's largest, 65504): nothing appended, as Append refuses it", q.Block, cfg.DType)
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
	counts := slices.Repeat([]int{n}, len(seqs))
	return c.rotateTokensLocked(k, seqs, counts, c.cfg.HKV, func(i, h, t int) int { return (i*c.cfg.HKV+h)*n + t })
}

// rotateTokensLocked is x with the rows of new tokens rotated by the
// cache's RoPE at their positions (x itself without RoPE): counts[i]
// tokens of sequence seqs[i], token t at Lengths()[seqs[i]] + t (before
// the append), its row of head h (of heads) row(i, h, t). The caller
// holds c.mu.
func (c *Cache) rotateTokensLocked(x []float32, seqs, counts []int, heads int, row func(i, h, t int) int) []float32 {
	if c.rope == nil {
		return x
	}
	dk := c.cfg.DK
	r := c.rope.r
	rot := r.RotatedDims(dk)
	inv := r.InvFreq(rot)
	out := slices.Clone(x)
	cs := make([]float32, rot)
	for i, b := range seqs {
		for t := range counts[i] {
			core.CosSin(c.lens[b]+t, inv, cs)
			for h := range heads {
				at := row(i, h, t) * dk
				core.RotatePairs(out[at:at+dk], rot, r.Style, cs)
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
		// the first new token (SEMANTICS.md §4.4), in a copy of the pool
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
