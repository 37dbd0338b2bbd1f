package main

import (
	"errors"
	"fmt"
	"math"
	"slices"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/weights"
)

// Config is a Llama-style decoder's shape.
type Config struct {
	Vocab, DModel, Layers int
	Heads, KVHeads        int // query heads; key/value heads (a divisor of Heads)
	HeadDim, FFN          int
	Eps                   float32 // RMSNorm's
	Theta                 float64 // RoPE's base
	// Capacity is the most positions a sequence reaches: the KV caches'
	// length and the RoPE table's.
	Capacity int
}

// TinyLlama is the model of testdata/decoder (tools/decoder_reference.py
// made it).
var TinyLlama = Config{Vocab: 256, DModel: 128, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 16, FFN: 256,
	Eps: 1e-5, Theta: 10000, Capacity: 64}

// attnUsage is what vkattn needs of a buffer it reads or writes in place
// (vkattn.BufferRegion's Usage): storage and texel-buffer views of it,
// and copies from and to it.
const attnUsage = vkattn.HostBufferUsage

// attnBound is the bound the host declares for every |value| of Q, K and
// V it writes (vkattn.BufferRegion's Bound); Step checks each token's
// values against it. This model's reach 8.3 (TestDecoderMatchesReference logs it).
const attnBound = 1e4

// Model is the decoder on the host's device: weights and activations in
// the host's buffers, the host's kernels for everything but attention,
// and vkattn, opened on the same device, for attention over a KV cache
// per layer. A token is one command buffer, one submission and one wait.
type Model struct {
	Cfg     Config
	Host    *Host
	Attn    *vkattn.Device
	Kernels *Kernels

	embed, finalNorm *Buffer
	layers           []*layer
	// Activations: the token id the host writes, the residual stream x,
	// the normalised h, the feed-forward's gate, up and their product,
	// the logits, RoPE's cosines and sines.
	token, x, h, gate, up, act, logits, rope *Buffer

	embedB, finalNormB, logitsB, swiglu *Binding
	pos                                 int
	// MaxQKV is the largest |value| of Q, K and V so far.
	MaxQKV float64
	// broken is why Step cannot go on: a failure after the caches took
	// a token leaves them ahead of pos.
	broken error
	closed bool
}

// layer is one transformer block's weights, the dispatches that use them,
// its attention's operands and its KV cache.
type layer struct {
	attnNorm, wq, wk, wv, wo, mlpNorm, wGate, wUp, wDown   *Buffer
	norm1, q, k, v, ropeQ, ropeK, o, norm2, gate, up, down *Binding
	// The attention's operands: buffers of the host's that vkattn reads
	// (Q, K, V) or writes (O) in place, through tensors over them. Each
	// layer has its own, so all of a token's values stay to be checked
	// after it.
	qBuf, kBuf, vBuf, oBuf *Buffer
	qT, kT, vT, oT         *vkattn.Tensor
	cache                  *kv.Cache
	step                   *kv.DecodeStep
}

// Open makes the host's device, opens vkattn on it with cfg, and loads
// the weights at path (a .safetensors or .npz file of TinyLlama's
// tensors, named as tools/decoder_reference.py names them).
func Open(path string, model Config, cfg vkattn.Config) (*Model, error) {
	h, err := NewHost()
	if err != nil {
		return nil, err
	}
	m := &Model{Cfg: model, Host: h}
	if err := m.open(path, cfg); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Model) open(path string, cfg vkattn.Config) error {
	c, h := m.Cfg, m.Host
	if min(c.Vocab, c.DModel, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Capacity) < 1 ||
		c.Heads%c.KVHeads != 0 || c.HeadDim%2 != 0 || c.Heads*c.HeadDim != c.DModel {
		return fmt.Errorf("config %+v: want positive sizes, Heads a multiple of KVHeads, an even HeadDim and Heads*HeadDim = DModel", c)
	}
	var err error
	if m.Attn, err = vkattn.OpenOn(vkattn.SharedDevice{Instance: h.Instance, PhysicalDevice: h.PhysicalDevice,
		Device: h.Device, QueueFamily: h.Family, QueueIndex: 0}, cfg); err != nil {
		return err
	}
	if m.Kernels, err = h.NewKernels(); err != nil {
		return err
	}
	if err := m.loadWeights(path); err != nil {
		return err
	}
	floats := func(n int) (*Buffer, error) { return h.NewBuffer(uint64(4*n), StorageUsage) }
	for _, b := range []struct {
		dst **Buffer
		n   int
	}{{&m.token, 1}, {&m.x, c.DModel}, {&m.h, c.DModel}, {&m.gate, c.FFN}, {&m.up, c.FFN}, {&m.act, c.FFN},
		{&m.logits, c.Vocab}} {
		if *b.dst, err = floats(b.n); err != nil {
			return err
		}
	}
	if m.rope, err = floats(c.Capacity * c.HeadDim); err != nil {
		return err
	}
	if err := m.rope.Write(ropeTable(c.Capacity, c.HeadDim, c.Theta)); err != nil {
		return err
	}
	if err := m.attention(); err != nil {
		return err
	}
	return m.bind()
}

// loadWeights reads every tensor into a buffer of its own, each checked
// against the shape the config gives it.
func (m *Model) loadWeights(path string) error {
	f, err := weights.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	c := m.Cfg
	load := func(name string, shape ...int) (*Buffer, error) {
		t, err := f.Read(name)
		if err != nil {
			return nil, err
		}
		if !slices.Equal(t.Shape, shape) || t.Data == nil {
			return nil, fmt.Errorf("%s: tensor %s is %s %v, want float %v", path, name, t.DType, t.Shape, shape)
		}
		if i := vkattn.FirstNonFinite(t.Data); i >= 0 {
			return nil, fmt.Errorf("%s: tensor %s holds %v at %d", path, name, t.Data[i], i)
		}
		b, err := m.Host.NewBuffer(uint64(4*len(t.Data)), StorageUsage)
		if err != nil {
			return nil, err
		}
		return b, b.Write(t.Data)
	}
	if m.embed, err = load("embed", c.Vocab, c.DModel); err != nil {
		return err
	}
	if m.finalNorm, err = load("final_norm", c.DModel); err != nil {
		return err
	}
	kvWidth := c.KVHeads * c.HeadDim
	for i := range c.Layers {
		l := &layer{}
		m.layers = append(m.layers, l)
		p := fmt.Sprintf("layers.%d.", i)
		for _, w := range []struct {
			dst   **Buffer
			name  string
			shape []int
		}{
			{&l.attnNorm, "attn_norm", []int{c.DModel}},
			{&l.wq, "wq", []int{c.DModel, c.DModel}},
			{&l.wk, "wk", []int{kvWidth, c.DModel}},
			{&l.wv, "wv", []int{kvWidth, c.DModel}},
			{&l.wo, "wo", []int{c.DModel, c.DModel}},
			{&l.mlpNorm, "mlp_norm", []int{c.DModel}},
			{&l.wGate, "w_gate", []int{c.FFN, c.DModel}},
			{&l.wUp, "w_up", []int{c.FFN, c.DModel}},
			{&l.wDown, "w_down", []int{c.DModel, c.FFN}},
		} {
			if *w.dst, err = load(p+w.name, w.shape...); err != nil {
				return err
			}
		}
	}
	return nil
}

// attention makes each layer's buffers of Q, K, V and O with tensors
// over them, its KV cache and its decode step.
func (m *Model) attention() error {
	c := m.Cfg
	var err error
	for _, l := range m.layers {
		for _, t := range []struct {
			buf   **Buffer
			ten   **vkattn.Tensor
			heads int
		}{{&l.qBuf, &l.qT, c.Heads}, {&l.kBuf, &l.kT, c.KVHeads}, {&l.vBuf, &l.vT, c.KVHeads}, {&l.oBuf, &l.oT, c.Heads}} {
			if *t.buf, err = m.Host.NewBuffer(uint64(4*t.heads*c.HeadDim), attnUsage); err != nil {
				return err
			}
			b := *t.buf
			if *t.ten, err = m.Attn.TensorOver(vkattn.BufferRegion{Buffer: b.Handle, Size: b.Size, Usage: b.Usage,
				Offset: 0, Shape: []int{1, t.heads, 1, c.HeadDim}, Type: vkattn.Float32, Bound: attnBound}); err != nil {
				return err
			}
		}
		if l.cache, err = kv.New(m.Attn, kv.Config{B: 1, HKV: c.KVHeads, Capacity: c.Capacity, DK: c.HeadDim, DV: c.HeadDim,
			DType: vkattn.Float32, PageSize: 16}); err != nil {
			return err
		}
		// The default scale is 1/sqrt(HeadDim); the step's query is the
		// newest position, which sees the whole cache: causal.
		if l.step, err = l.cache.PrepareStep(c.Heads, vkattn.Options{}); err != nil {
			return err
		}
	}
	return nil
}

// bind attaches the buffers to the kernels: a descriptor set for every
// dispatch of a token, made once.
func (m *Model) bind() error {
	h, ks := m.Host, m.Kernels
	var err error
	bind := func(dst **Binding, k *Kernel, bufs ...*Buffer) {
		if err == nil {
			*dst, err = h.Bind(k, bufs...)
		}
	}
	bind(&m.embedB, ks.Embed, m.token, m.embed, m.x)
	for _, l := range m.layers {
		bind(&l.norm1, ks.RMSNorm, m.x, l.attnNorm, m.h)
		bind(&l.q, ks.MatVec, l.wq, m.h, l.qBuf)
		bind(&l.k, ks.MatVec, l.wk, m.h, l.kBuf)
		bind(&l.v, ks.MatVec, l.wv, m.h, l.vBuf)
		bind(&l.ropeQ, ks.RoPE, l.qBuf, m.rope)
		bind(&l.ropeK, ks.RoPE, l.kBuf, m.rope)
		bind(&l.o, ks.MatVec, l.wo, l.oBuf, m.x)
		bind(&l.norm2, ks.RMSNorm, m.x, l.mlpNorm, m.h)
		bind(&l.gate, ks.MatVec, l.wGate, m.h, m.gate)
		bind(&l.up, ks.MatVec, l.wUp, m.h, m.up)
		bind(&l.down, ks.MatVec, l.wDown, m.act, m.x)
	}
	bind(&m.swiglu, ks.SwiGLU, m.gate, m.up, m.act)
	bind(&m.finalNormB, ks.RMSNorm, m.x, m.finalNorm, m.h)
	bind(&m.logitsB, ks.MatVec, m.embed, m.h, m.logits)
	return err
}

// Pos is the position the next token takes.
func (m *Model) Pos() int { return m.pos }

// Step runs the model on token at the next position and returns the
// logits of the token after it: the whole forward pass is recorded into
// the host's one command buffer (vkattn's attention included), submitted
// once and waited for once.
func (m *Model) Step(token int) ([]float32, error) {
	c := m.Cfg
	if token < 0 || token >= c.Vocab {
		return nil, fmt.Errorf("token %d: want 0 to %d", token, c.Vocab-1)
	}
	if m.pos >= c.Capacity {
		return nil, fmt.Errorf("position %d: the model holds %d positions", m.pos, c.Capacity)
	}
	if m.broken != nil {
		return nil, m.broken
	}
	m.token.Uints()[0] = uint32(token)
	if err := m.Host.Begin(); err != nil {
		return nil, err
	}
	if err := m.record(); err != nil {
		m.Host.Abandon()
		m.broken = fmt.Errorf("the model stopped at position %d: %w", m.pos, err)
		return nil, m.broken
	}
	if err := m.Host.Submit(); err != nil {
		m.broken = fmt.Errorf("the model stopped at position %d: %w", m.pos, err)
		return nil, m.broken
	}
	m.pos++
	// The bound promised to vkattn, checked after the fact: a value past
	// it would have made the attention's results undefined.
	for i, l := range m.layers {
		for _, b := range []struct {
			name string
			buf  *Buffer
			n    int
		}{{"q", l.qBuf, c.Heads * c.HeadDim}, {"k", l.kBuf, c.KVHeads * c.HeadDim}, {"v", l.vBuf, c.KVHeads * c.HeadDim}} {
			a := b.buf.MaxAbs(b.n)
			if !(a <= attnBound) {
				m.broken = fmt.Errorf("position %d: |%s| of layer %d reached %g, past the bound %g declared to vkattn", m.pos-1, b.name, i, a, float64(attnBound))
				return nil, m.broken
			}
			m.MaxQKV = max(m.MaxQKV, a)
		}
	}
	return slices.Clone(m.logits.Floats()[:c.Vocab]), nil
}

// record records one token's forward pass; every dispatch ends with a
// barrier (Host.Dispatch), and vkattn's Record brings its own.
func (m *Model) record() error {
	c, h := m.Cfg, m.Host
	var err error
	dispatch := func(b *Binding, groups int, push ...uint32) {
		if err == nil {
			err = h.Dispatch(b, push, groups)
		}
	}
	pos, eps := uint32(m.pos), math.Float32bits(c.Eps)
	d, ffn, kvw := uint32(c.DModel), uint32(c.FFN), uint32(c.KVHeads*c.HeadDim)
	dispatch(m.embedB, groupsOf(c.DModel), d, uint32(c.Vocab))
	for _, l := range m.layers {
		dispatch(l.norm1, 1, d, eps)
		dispatch(l.q, groupsOf(c.DModel), d, d, 0)
		dispatch(l.k, groupsOf(int(kvw)), kvw, d, 0)
		dispatch(l.v, groupsOf(int(kvw)), kvw, d, 0)
		dispatch(l.ropeQ, groupsOf(c.Heads*c.HeadDim/2), uint32(c.Heads), uint32(c.HeadDim), pos)
		dispatch(l.ropeK, groupsOf(c.KVHeads*c.HeadDim/2), uint32(c.KVHeads), uint32(c.HeadDim), pos)
		if err != nil {
			return err
		}
		// Appends k and v to the cache at pos, attends with q over
		// positions 0..pos and writes o.
		if err := l.step.Record(vkattn.CommandBuffer{Device: h.Device, Buffer: h.Cmd}, l.kT, l.vT, l.qT, l.oT); err != nil {
			return fmt.Errorf("attention at position %d: %w", m.pos, err)
		}
		dispatch(l.o, groupsOf(c.DModel), d, d, 1) // x += wo o
		dispatch(l.norm2, 1, d, eps)
		dispatch(l.gate, groupsOf(c.FFN), ffn, d, 0)
		dispatch(l.up, groupsOf(c.FFN), ffn, d, 0)
		dispatch(m.swiglu, groupsOf(c.FFN), ffn)
		dispatch(l.down, groupsOf(c.DModel), d, ffn, 1) // x += w_down act
	}
	dispatch(m.finalNormB, 1, d, eps)
	dispatch(m.logitsB, groupsOf(c.Vocab), uint32(c.Vocab), d, 0) // tied: logits = embed h
	if err != nil {
		return err
	}
	h.Barrier(vulkan.PipelineStageHostBit, vulkan.AccessHostReadBit)
	return nil
}

// Generate runs prompt from the model's current position, then n tokens
// chosen greedily (the largest logit; the first of equals), and returns
// those n tokens.
func (m *Model) Generate(prompt []int, n int) ([]int, error) {
	if len(prompt) == 0 {
		return nil, errors.New("an empty prompt")
	}
	var logits []float32
	var err error
	for _, t := range prompt {
		if logits, err = m.Step(t); err != nil {
			return nil, err
		}
	}
	out := make([]int, 0, n)
	for len(out) < n {
		next := Argmax(logits)
		out = append(out, next)
		if len(out) == n {
			break
		}
		if logits, err = m.Step(next); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Argmax is the index of the largest value, the first of equals.
func Argmax(xs []float32) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}

// Close frees what vkattn made (the decode steps, caches and tensors),
// closes vkattn's device, and then the host's buffers, kernels, device
// and instance: vkattn's device must close before the VkDevice it was
// opened on is destroyed. Safe to call more than once.
func (m *Model) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	for _, l := range m.layers {
		if l.step != nil {
			l.step.Close()
		}
		if l.cache != nil {
			l.cache.Close()
		}
		for _, t := range []*vkattn.Tensor{l.qT, l.kT, l.vT, l.oT} {
			if t != nil {
				t.Close() // forgets the host's buffer; it stays the host's
			}
		}
	}
	var errs []error
	if m.Attn != nil {
		errs = append(errs, m.Attn.Close())
	}
	errs = append(errs, m.Host.Close())
	return errors.Join(errs...)
}
