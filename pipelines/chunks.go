package pipelines

import "github.com/vkattn/vkattn/core"

// A binding reaches at most maxStorageBufferRange bytes (storage) or
// maxTexelBufferElements texels (texel views), so a call whose tensors are
// larger runs as chunks: batch items and KV heads (with their query heads),
// and if one KV head is still too large, blocks of query rows of one query
// head; each chunk is bound through windows of the buffers that hold only
// what it reads and writes. The chunks are recorded in one submission.

// chunk is the part of a call over nb batch items from b0, nkv KV heads
// from hk0 with nh query heads from h0, and nl query rows from l0. Either
// the query heads are all those of the KV heads, or (nkv = nh = 1) one
// query head of its KV head; nb > 1 only with every head, nl < L only with
// one query head of one batch item.
type Chunk struct{ b0, nb, hk0, nkv, h0, nh, l0, nl int }

// headsChunk is every query row of batch item b's KV heads [hk0, hk0+nkv)
// and their query heads.
func headsChunk(x *AttentionShape, b, nb, hk0, nkv int) Chunk {
	group := x.H / x.HKV
	return Chunk{b, nb, hk0, nkv, hk0 * group, nkv * group, 0, x.L}
}

// headsChunks are the chunks of g KV heads (with their query heads) of one
// batch item each.
func headsChunks(x *AttentionShape, g int) []Chunk {
	var cs []Chunk
	for b := 0; b < x.B; b++ {
		for hk := 0; hk < x.HKV; hk += g {
			cs = append(cs, headsChunk(x, b, 1, hk, min(g, x.HKV-hk)))
		}
	}
	return cs
}

// rowChunks are the chunks of up to nl query rows of one query head of one
// batch item each.
func rowChunks(x *AttentionShape, nl int) []Chunk {
	cs := make([]Chunk, 0, x.B*x.H*ceilDiv(x.L, nl))
	eachRowChunk(x, nl, func(c Chunk) bool { cs = append(cs, c); return true })
	return cs
}

// eachRowChunk calls f with the chunks of rowChunks(x, nl) in turn until
// it returns false, and reports whether it never did: planning tries many
// row counts of calls with up to millions of such chunks.
func eachRowChunk(x *AttentionShape, nl int, f func(Chunk) bool) bool {
	group := x.H / x.HKV
	for b := 0; b < x.B; b++ {
		for h := 0; h < x.H; h++ {
			for l0 := 0; l0 < x.L; l0 += nl {
				if !f(Chunk{b, 1, h / group, 1, h, 1, l0, min(nl, x.L-l0)}) {
					return false
				}
			}
		}
	}
	return true
}

// flops is the work of chunk c of a call of shape x: the two products'
// multiply-adds over every key.
func (c Chunk) flops(x *AttentionShape) float64 {
	return 2 * float64(c.nb*c.nh*c.nl) * float64(x.S) * float64(x.DK+x.DV)
}

// DispatchFLOPs is the most attention work one submission carries: a
// cancelled call stops between submissions, and Windows ends a dispatch
// that runs past about 2 s (TDR) as a lost device. At lavapipe's speed
// on two cores (BENCHMARKS.md "Prefill") a CPU device's submission takes
// under a second; GPUs run from about 1 TFLOP/s.
func DispatchFLOPs(dev core.DeviceInfo) float64 {
	if dev.Type == core.DeviceCPU {
		return 2e10
	}
	return 5e11
}

// ChunkList is the plan's chunks, as planChunks chose them.
func (p *AttentionPlan) ChunkList() []Chunk {
	x := &p.Shape
	switch {
	case p.Chunks <= 1:
		return []Chunk{headsChunk(x, 0, x.B, 0, x.HKV)}
	case p.ChunkHeads == p.ChunkKVHeads*(x.H/x.HKV) && p.ChunkRows == x.L:
		return headsChunks(x, p.ChunkKVHeads)
	}
	return rowChunks(x, p.ChunkRows)
}

// span is the element range [lo, hi) of a tensor a chunk touches.
type span struct{ lo, hi int }

// viewSpan is the range of a strided layout over nb x nh x rows x width
// elements from batch b0 and head h0 (strides are non-negative).
func viewSpan(v Layout, b0, nb, h0, nh, rows, width int) span {
	lo := v.Offset + b0*v.Strides[0] + h0*v.Strides[1]
	return span{lo, lo + (nb-1)*v.Strides[0] + (nh-1)*v.Strides[1] + (rows-1)*v.Strides[2] + width}
}

// maskSpan is the range of a mask over a chunk's (batch, head, row, key)
// indices: rows [l0, l0+nl).
func maskSpan(m MaskLayout, b0, nb, h0, nh, l0, nl, s int) span {
	st := m.Strides
	lo := b0*st[0] + h0*st[1] + l0*st[2]
	return span{lo, lo + (nb-1)*st[0] + (nh-1)*st[1] + (nl-1)*st[2] + (s-1)*st[3] + 1}
}

// rowsFrom is v starting at position l0.
func rowsFrom(v Layout, l0 int) Layout {
	v.Offset += l0 * v.Strides[2]
	return v
}

// window is a buffer range bound for one chunk: bytes [offset, offset+size)
// and the element index of the range start.
type window struct {
	offset, size uint64
	first        int
}

// bindWindow aligns a span's start down to the binding's offset alignment
// (and to whole vec4s for vec4 texel views) and checks the window against
// the binding's reach.
func bindWindow(dev core.DeviceInfo, what string, sp span, texel, vec4 bool, t core.DType) (window, error) {
	elem := uint64(t.Bytes())
	// Whole 32-bit words (halves are read two a word on the storage path),
	// and whole vec4 slots: the shader finds slot c of a row at
	// (element >> 2) + c of its window.
	align := uint64(4)
	if vec4 {
		// A window of halves starts on a whole 16-byte texel too, as
		// Halves8 reads them eight a texel.
		align = max(4*elem, 16)
	}
	reach := uint64(dev.Limits.MaxStorageBufferRange)
	if texel {
		align = max(align, dev.Limits.MinTexelAlignment)
		texelBytes := elem
		if t.Quantized() {
			texelBytes = 4 // read as words
		}
		if vec4 {
			texelBytes *= 4
		}
		reach = uint64(dev.Limits.MaxTexelBufferElements) * texelBytes
	} else {
		align = max(align, dev.Limits.MinStorageAlignment)
	}
	lo := uint64(sp.lo) * elem / align * align
	// The window ends on a word boundary so the last half's word is in it
	// (half tensors' buffers are allocated in whole words).
	hi := (uint64(sp.hi)*elem + 3) / 4 * 4
	if texel && vec4 && elem == 4 {
		// Whole texels of four floats: a mask read four keys a fetch has
		// rows of any length, its last texel partly past them (buffers
		// are allocated in whole 16-byte texels).
		hi = (hi + 15) / 16 * 16
	}
	w := window{offset: lo, size: hi - lo, first: int(lo / elem)}
	if w.size > reach {
		return w, Limitf("%s needs a %d-byte window, more than one binding reaches (%d bytes)", what, w.size, reach)
	}
	return w, nil
}

// chunkBinding is one buffer of a chunk: its binding, the span it
// touches, and where the chunk's parameters keep its element offset in
// the window. The window covers the span, or whole when set.
type chunkBinding struct {
	binding int
	what    string
	sp      span
	texel   bool
	vec4    bool
	dtype   core.DType
	offset  *int
	whole   *span
}

// window is the span b's window covers: whole, or the span it touches.
func (b chunkBinding) window() span {
	if b.whole != nil {
		return *b.whole
	}
	return b.sp
}

// chunkBindings lists the windowed buffers of chunk c of plan p; their
// offsets go to the chunk's shape cs and parameters extra. Planning
// passes nil for both: only the windows are wanted.
func chunkBindings(p *AttentionPlan, c Chunk, cs *AttentionShape, extra *chunkParams) []chunkBinding {
	if cs == nil {
		cs, extra = new(AttentionShape), new(chunkParams)
	}
	s := &p.Shape
	h0, nh := c.h0, c.nh
	texel := p.Path == core.TexelLoadPath
	kSpan, vSpan := viewSpan(s.K, c.b0, c.nb, c.hk0, c.nkv, s.S, s.DK), viewSpan(s.V, c.b0, c.nb, c.hk0, c.nkv, s.S, s.DV)
	if s.Paging > 0 {
		// Any page may hold any item's keys: the whole pools.
		kSpan = viewSpan(s.K, 0, s.Pages, 0, s.HKV, s.Paging, s.DK)
		vSpan = viewSpan(s.V, 0, s.Pages, 0, s.HKV, s.Paging, s.DV)
	}
	// A q8_0 or q4_0 K or V is bound whole, its scales lying after every
	// quant; the chunk's offset is still its first element there.
	var kWhole, vWhole *span
	if s.K.Type.Quantized() {
		w := s.K.quantSpan()
		kWhole = &w
	}
	if s.V.Type.Quantized() {
		w := s.V.quantSpan()
		vWhole = &w
	}
	bs := []chunkBinding{
		{BindQ, "Q", viewSpan(rowsFrom(s.Q, c.l0), c.b0, c.nb, h0, nh, c.nl, s.DK), texel, p.Vec4, s.Q.Type, &cs.Q.Offset, nil},
		{BindK, "K", kSpan, texel, p.Vec4, s.K.Type, &cs.K.Offset, kWhole},
		{BindV, "V", vSpan, texel, p.Vec4, s.V.Type, &cs.V.Offset, vWhole},
		{BindO, "O", viewSpan(rowsFrom(s.O, c.l0), c.b0, c.nb, h0, nh, c.nl, s.DV), false, false, core.Float32, &cs.O.Offset, nil},
	}
	// LSE and weights are dense (B, H, L[, S]); a chunk of several batch
	// items has every head, so its range is contiguous (a block of query
	// rows is contiguous within each of its heads).
	rows := span{(c.b0*s.H+h0)*s.L + c.l0, ((c.b0+c.nb-1)*s.H+h0+nh-1)*s.L + c.l0 + c.nl}
	if s.LSE {
		bs = append(bs, chunkBinding{BindLSE, "LSE", rows, false, false, core.Float32, &extra.lse, nil})
	}
	if s.Weights {
		bs = append(bs, chunkBinding{BindWeights, "weights", span{rows.lo * s.S, rows.hi * s.S}, false, false, core.Float32, &extra.weights, nil})
	}
	if s.Mask.Given {
		bs = append(bs, chunkBinding{BindMask, "mask", maskSpan(s.Mask, c.b0, c.nb, h0, nh, c.l0, c.nl, s.S), texel, p.MaskVec4, core.Float32, &extra.mask, nil})
	}
	if s.BoolMask.Given {
		bs = append(bs, chunkBinding{BindBoolMask, "boolean mask", maskSpan(s.BoolMask, c.b0, c.nb, h0, nh, c.l0, c.nl, s.S), texel, p.BoolMaskVec4, core.Float32, &extra.boolMask, nil})
	}
	return bs
}

// fits reports whether every binding of chunk c has a window within reach.
func fits(dev core.DeviceInfo, p *AttentionPlan, c Chunk) error {
	for _, b := range chunkBindings(p, c, nil, nil) {
		if _, err := bindWindow(dev, b.what, b.window(), b.texel, b.vec4, b.dtype); err != nil {
			return err
		}
	}
	return nil
}

// planChunks splits a call into the fewest chunks whose windows fit: the
// whole call, else one batch item with as many KV heads as fit, else one
// query head of one batch item with as many of its rows as fit (not for
// split-K, whose few query rows are never what is large). A chunk of one
// query row that does not fit is a LimitError.
//
// Chunks also bound a submission's work (DispatchFLOPs): a call larger than
// that runs as chunks found the same way, down to one query row, each
// submitted on its own (Prepared.Run), so a cancelled context stops it
// between them and no dispatch runs for long. Paged and split-K calls are
// not split for their work.
func planChunks(dev core.DeviceInfo, p *AttentionPlan) ([]Chunk, error) {
	x := &p.Shape
	costly := func(c Chunk) bool {
		return p.Splits == 0 && x.Paging == 0 && c.nl > 1 && c.flops(x) > DispatchFLOPs(dev)
	}
	whole := headsChunk(x, 0, x.B, 0, x.HKV)
	err := fits(dev, p, whole)
	if err == nil && !costly(whole) {
		return []Chunk{whole}, nil
	}
	if x.Paging > 0 {
		// Windows of the pools would need each chunk's head offset.
		return nil, Limitf("paged K/V pools larger than one binding are not split: %v", err)
	}
	var lastErr error
	// fitsAll reports whether chunk c fits a binding and a submission.
	fitsAll := func(c Chunk) bool {
		if err := fits(dev, p, c); err != nil {
			lastErr = err
			return false
		}
		return !costly(c)
	}
	// allFit returns cs, or nil if one of them does not fit.
	allFit := func(cs []Chunk) []Chunk {
		for _, c := range cs {
			if !fitsAll(c) {
				return nil
			}
		}
		return cs
	}
	for g := x.HKV; g >= 1; g-- {
		if cs := allFit(headsChunks(x, g)); cs != nil {
			return cs, nil
		}
	}
	if p.Splits == 0 {
		// One query head at a time, with all its rows, then blocks of
		// them halved until they fit: windows grow with the rows, so the
		// first size that fits is within 2x of the largest.
		for nl := x.L; ; nl = (nl + 1) / 2 {
			if eachRowChunk(x, nl, fitsAll) {
				return rowChunks(x, nl), nil
			}
			if nl == 1 {
				break
			}
		}
	}
	how := ""
	if p.Splits == 0 {
		how = ", even a query row at a time"
	}
	return nil, Limitf("one KV head of one batch item does not fit a binding%s: %v", how, lastErr)
}

// Window is the range of a buffer that one binding of a dispatch reads or
// writes: bytes [Offset, Offset+Size).
type Window struct {
	Binding      int
	Offset, Size uint64
}

// bindWindows binds each of bs through its window and stores its element
// offset within the window where the binding says.
func bindWindows(dev core.DeviceInfo, bs []chunkBinding) ([]Window, error) {
	ws := make([]Window, len(bs))
	for i, b := range bs {
		w, err := bindWindow(dev, b.what, b.window(), b.texel, b.vec4, b.dtype)
		if err != nil {
			return nil, err
		}
		ws[i] = Window{Binding: b.binding, Offset: w.offset, Size: w.size}
		*b.offset = b.sp.lo - w.first
	}
	return ws, nil
}
