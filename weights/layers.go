package weights

import (
	"fmt"
	"maps"
	"slices"

	"github.com/vkattn/vkattn/core"
)

// LoadMHA reads the weights of a PyTorch nn.MultiheadAttention layer saved
// at top level (torch's state_dict names without a prefix) from a .npz or
// .safetensors file, reading only the layer's tensors (File.MHA). See MHA
// for names, shapes and errors.
func LoadMHA(path string, dModel, kdim, vdim int) (*core.MHAWeights, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.MHA("", dModel, kdim, vdim)
}

// MHA picks the tensors of an nn.MultiheadAttention layer out of ts by
// their state_dict names, each preceded by prefix (such as
// "layers.0.self_attn."):
//
//	in_proj_weight (3d, d)                           packed, when kdim = vdim = d
//	q_proj_weight (d, d), k_proj_weight (kv, kdim),
//	v_proj_weight (kv, vdim)                         otherwise
//	in_proj_bias (d + 2kv)                           optional, either layout
//	out_proj.weight (d, d)
//	out_proj.bias (d)                                optional
//
// d is dModel (embed_dim); kdim and vdim of 0 mean d, as PyTorch's None.
// kv is d for PyTorch's layers; a k_proj_weight with fewer rows sets
// MHAWeights.KVDim (grouped-query K/V heads).
// Other tensors in ts are ignored, except bias_k and bias_v (add_bias_kv),
// which are not supported. A missing tensor is an error wrapping
// ErrMissing; a wrongly shaped one an error wrapping core.ErrShape that
// names the tensor, its shape and the shape wanted.
func MHA(ts map[string]Tensor, prefix string, dModel, kdim, vdim int) (*core.MHAWeights, error) {
	return mha(tensorMap(ts), prefix, dModel, kdim, vdim)
}

func mha(src source, prefix string, dModel, kdim, vdim int) (*core.MHAWeights, error) {
	if kdim == 0 {
		kdim = dModel
	}
	if vdim == 0 {
		vdim = dModel
	}
	if dModel <= 0 || kdim < 0 || vdim < 0 {
		return nil, fmt.Errorf("%w: embed_dim %d, kdim %d, vdim %d", core.ErrEmpty, dModel, kdim, vdim)
	}
	d := dModel
	for _, n := range []string{"bias_k", "bias_v"} {
		if src.has(prefix + n) {
			return nil, fmt.Errorf("%w: %s%s (add_bias_kv=True)", ErrUnsupported, prefix, n)
		}
	}
	g := getter{src: src, prefix: prefix}
	w := &core.MHAWeights{DModel: d, KDim: kdim, VDim: vdim}
	packed := src.has(prefix + "in_proj_weight")
	hasQ := src.has(prefix + "q_proj_weight")
	hasK := src.has(prefix + "k_proj_weight")
	hasV := src.has(prefix + "v_proj_weight")
	switch {
	case packed && (hasQ || hasK || hasV):
		return nil, fmt.Errorf("%w: %sin_proj_weight and %sq/k/v_proj_weight both present", ErrUnsupported, prefix, prefix)
	case packed && (kdim != d || vdim != d):
		return nil, fmt.Errorf("%w: %sin_proj_weight is packed, which needs kdim = vdim = embed_dim %d, but kdim is %d and vdim %d (PyTorch stores q/k/v_proj_weight then)",
			core.ErrShape, prefix, d, kdim, vdim)
	case packed:
		w.InProjWeight = g.get("in_proj_weight", 3*d, d)
	case hasQ || hasK || hasV:
		// k_proj_weight with fewer rows than d: grouped-query K/V heads.
		kh, ok, err := src.lookup(prefix + "k_proj_weight")
		if err != nil {
			return nil, err
		}
		if ok && len(kh.shape) == 2 && kh.shape[0] != d {
			w.KVDim = kh.shape[0]
		}
		w.QProjWeight = g.get("q_proj_weight", d, d)
		w.KProjWeight = g.get("k_proj_weight", w.KVOut(), kdim)
		w.VProjWeight = g.get("v_proj_weight", w.KVOut(), vdim)
	default:
		return nil, fmt.Errorf("%w: neither %sin_proj_weight nor %sq/k/v_proj_weight is present (tensors: %s)", ErrMissing, prefix, prefix, src.list())
	}
	w.OutProjWeight = g.get("out_proj.weight", d, d)
	w.InProjBias = g.optional("in_proj_bias", d+2*w.KVOut())
	w.OutProjBias = g.optional("out_proj.bias", d)
	if g.err != nil {
		return nil, g.err
	}
	w.DType = storedType(src, prefix, "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight")
	// Check also rejects non-finite values.
	if err := w.Check(); err != nil {
		return nil, err
	}
	return w, nil
}

// LoadAdditive reads additive attention weights (names W_q, W_k, b, w_a at
// top level) from a .npz or .safetensors file, reading only those tensors
// (File.Additive). See Additive.
func LoadAdditive(path string, dQ, dK int) (*core.AdditiveWeights, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Additive("", dQ, dK)
}

// Additive picks additive (Bahdanau) attention weights out of ts
// (SEMANTICS.md §12), each name preceded by prefix:
//
//	W_q (dQ, d_a), W_k (dK, d_a), b (d_a) optional, w_a (d_a) or (d_a, 1)
//
// d_a is read from W_q. W_q and W_k are (in, out), as SEMANTICS.md §12
// writes q W_q, not PyTorch's (out, in). Errors are those of MHA.
func Additive(ts map[string]Tensor, prefix string, dQ, dK int) (*core.AdditiveWeights, error) {
	return additive(tensorMap(ts), prefix, dQ, dK)
}

func additive(src source, prefix string, dQ, dK int) (*core.AdditiveWeights, error) {
	if dQ <= 0 || dK <= 0 {
		return nil, fmt.Errorf("%w: d_q %d, d_k %d", core.ErrEmpty, dQ, dK)
	}
	wq, ok, err := src.lookup(prefix + "W_q")
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, fmt.Errorf("%w: %sW_q (tensors: %s)", ErrMissing, prefix, src.list())
	}
	da := 0
	if len(wq.shape) == 2 {
		da = wq.shape[1]
	}
	if da <= 0 {
		return nil, fmt.Errorf("%w: %sW_q has shape %v, want (%d, d_a)", core.ErrShape, prefix, wq.shape, dQ)
	}
	g := getter{src: src, prefix: prefix}
	w := &core.AdditiveWeights{DQ: dQ, DK: dK, DA: da}
	w.WQ = g.get("W_q", dQ, da)
	w.WK = g.get("W_k", dK, da)
	w.Bias = g.optional("b", da)
	wa, ok, err := src.lookup(prefix + "w_a")
	switch {
	case err != nil:
		return nil, err
	case ok && len(wa.shape) == 2:
		w.WA = g.get("w_a", da, 1) // the column (d_a, 1) of SEMANTICS.md §12
	default:
		w.WA = g.get("w_a", da)
	}
	if g.err != nil {
		return nil, g.err
	}
	if err := w.Check(); err != nil {
		return nil, err
	}
	return w, nil
}

// storedType is the element type the named tensors present share when
// it is float16 or bfloat16 (float32 otherwise): weights stay as stored on
// the device, half the bytes, exactly the file's values.
func storedType(src source, prefix string, names ...string) core.DType {
	kinds := map[string]core.DType{"F16": core.Float16, "BF16": core.BFloat16}
	var common string
	for _, n := range names {
		h, ok, err := src.lookup(prefix + n)
		if err != nil || !ok {
			continue
		}
		if common != "" && h.dtype != common {
			return core.Float32
		}
		common = h.dtype
	}
	return kinds[common] // Float32 (the zero value) for any other type
}

// source is where the layer builders find tensors: a map already read, or
// a File, which reads a tensor's header only when asked about it and its
// data only when read.
type source interface {
	// has says whether the named tensor is present, reading nothing.
	has(name string) bool
	// lookup is the named tensor's header; ok is false when it is absent.
	lookup(name string) (h header, ok bool, err error)
	// read reads the named tensor.
	read(name string) (Tensor, error)
	// list names the tensors present, for error messages.
	list() string
}

// header is what the layer builders check before reading a tensor.
type header struct {
	shape []int
	dtype string
	float bool // the data is float values a weight can take
}

// tensorMap is a source of tensors already read.
type tensorMap map[string]Tensor

func (m tensorMap) has(name string) bool {
	_, ok := m[name]
	return ok
}

func (m tensorMap) lookup(name string) (header, bool, error) {
	t, ok := m[name]
	return header{shape: t.Shape, dtype: t.DType, float: t.Data != nil && t.DType != "BOOL"}, ok, nil
}

func (m tensorMap) read(name string) (Tensor, error) { return m[name], nil }

func (m tensorMap) list() string { return names(slices.Sorted(maps.Keys(m))) }

// getter reads float tensors of a fixed shape, checking each one's header
// before reading its data, keeping the first error.
type getter struct {
	src    source
	prefix string
	err    error
}

func (g *getter) get(name string, shape ...int) []float32 {
	return g.fetch(name, true, shape)
}

func (g *getter) optional(name string, shape ...int) []float32 {
	return g.fetch(name, false, shape)
}

func (g *getter) fetch(name string, required bool, shape []int) []float32 {
	if g.err != nil {
		return nil
	}
	h, ok, err := g.src.lookup(g.prefix + name)
	switch {
	case err != nil:
		g.err = err
	case !ok && required:
		g.err = fmt.Errorf("%w: %s%s, shape %v (tensors: %s)", ErrMissing, g.prefix, name, shape, g.src.list())
	case !ok:
	case !h.float:
		g.err = fmt.Errorf("%w: %s%s has dtype %s, want a float type (F32, F64, F16, BF16)", ErrUnsupported, g.prefix, name, h.dtype)
	case !slices.Equal(h.shape, shape):
		g.err = fmt.Errorf("%w: %s%s has shape %v, want %v", core.ErrShape, g.prefix, name, h.shape, shape)
	default:
		t, err := g.src.read(g.prefix + name)
		if err != nil {
			g.err = err
			return nil
		}
		return t.Data
	}
	return nil
}

// MHAOptions turns the masks of a PyTorch nn.MultiheadAttention call
// saved beside its inputs into layer options with PyTorch's meanings:
// key_padding_mask, bool (B, S), true = padded; attn_mask, (T, S) or
// (B*heads, T, S) with the b-major (B*heads) axis of PyTorch, bool with
// true = blocked, or float added to the scores. Either may be absent.
func MHAOptions(ts map[string]Tensor, heads, B, T, S int) (core.MHAOptions, error) {
	opts := core.MHAOptions{Heads: heads}
	if kp, ok := ts["key_padding_mask"]; ok {
		if kp.DType != "BOOL" || !slices.Equal(kp.Shape, []int{B, S}) {
			return opts, formatErr("key_padding_mask is %s %v, want BOOL [%d %d]", kp.DType, kp.Shape, B, S)
		}
		opts.KeyPadding = &core.KeyPadding{Padded: make([]bool, len(kp.Data))}
		for i, x := range kp.Data {
			opts.KeyPadding.Padded[i] = x != 0
		}
	}
	am, ok := ts["attn_mask"]
	if !ok {
		return opts, nil
	}
	var shape core.MaskShape
	switch {
	case slices.Equal(am.Shape, []int{T, S}):
		shape = core.MaskShape{1, 1, T, S}
	case slices.Equal(am.Shape, []int{B * heads, T, S}):
		shape = core.MaskShape{B, heads, T, S}
	default:
		return opts, formatErr("attn_mask shape %v, want [%d %d] or [%d %d %d]", am.Shape, T, S, B*heads, T, S)
	}
	if am.DType == "BOOL" {
		m := core.BoolMask{Shape: shape, Values: make([]bool, len(am.Data)), Meaning: core.TrueBlocks}
		for i, x := range am.Data {
			m.Values[i] = x != 0
		}
		opts.Attention.BoolMasks = []core.BoolMask{m}
	} else {
		opts.Attention.Mask = &core.Mask{Shape: shape, Values: am.Data}
	}
	return opts, nil
}
