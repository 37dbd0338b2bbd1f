package core

// MHAWeights are the parameters of one PyTorch nn.MultiheadAttention layer
// in PyTorch's own layout: every weight is (out, in) row-major, so a
// projection is y = x W^T + b.
//
// Either InProjWeight is set (the packed layout PyTorch uses when
// KDim == VDim == DModel) or QProjWeight, KProjWeight and VProjWeight are
// (the layout it uses otherwise), never both. PyTorch's add_bias_kv
// (bias_k, bias_v) and add_zero_attn are not supported.
type MHAWeights struct {
	// DModel is PyTorch's embed_dim; KDim and VDim are the widths of the key
	// and value inputs (PyTorch kdim, vdim), DModel for self-attention.
	DModel, KDim, VDim int
	// KVDim is the output width of the K and V projections; 0 means DModel
	// (every PyTorch nn.MultiheadAttention). A smaller multiple of the head
	// width DModel/Heads gives grouped-query attention: KVDim/(DModel/Heads)
	// K/V heads, each shared by a group of query heads. It needs the
	// separate q/k/v_proj_weight layout.
	KVDim int
	// DType is the element type the weight matrices are stored in on the
	// device (zero: float32): the values below are rounded to it, which is
	// exact for weights read from float16 or bfloat16 files. The dense
	// layers read them as stored and compute in float32; biases and every
	// output stay float32.
	DType DType

	// InProjWeight is in_proj_weight, (3*DModel, DModel): W_q, W_k, W_v
	// stacked along the output axis.
	InProjWeight []float32
	// QProjWeight (DModel, DModel), KProjWeight (KVDim, KDim) and
	// VProjWeight (KVDim, VDim) are q_proj_weight, k_proj_weight and
	// v_proj_weight.
	QProjWeight, KProjWeight, VProjWeight []float32
	// InProjBias is in_proj_bias, (3*DModel): b_q, b_k, b_v, used with
	// either weight layout ((DModel + 2*KVDim) with grouped K/V heads). nil
	// means no bias (PyTorch bias=False).
	InProjBias []float32
	// OutProjWeight is out_proj.weight, (DModel, DModel).
	OutProjWeight []float32
	// OutProjBias is out_proj.bias, (DModel); nil means no bias.
	OutProjBias []float32
}

// ParamCount is the number of weights and biases, 4d^2 + 4d for a
// self-attention layer with biases (SEMANTICS.md §11: 288 for d = 8).
func (w *MHAWeights) ParamCount() int {
	return len(w.InProjWeight) + len(w.QProjWeight) + len(w.KProjWeight) + len(w.VProjWeight) +
		len(w.InProjBias) + len(w.OutProjWeight) + len(w.OutProjBias)
}

// Check reports whether the weights are consistent with their dimensions:
// one weight layout, every tensor of the right size (errors name the
// PyTorch tensor and both shapes, wrapping ErrShape) and every value
// finite (ErrNonFinite), and a storage type the kernels read (ErrOption).
// Nil weights are ErrShape.
func (w *MHAWeights) Check() error {
	if w == nil {
		return Errorf(ErrShape, "MHA weights are nil")
	}
	if !w.DType.Valid() {
		return Errorf(ErrOption, "MHA weights of element type %v: want f32, f16 or bf16", w.DType)
	}
	d, kd, vd, kv := w.DModel, w.KDim, w.VDim, w.KVOut()
	if d <= 0 || kd <= 0 || vd <= 0 || kv <= 0 {
		return Errorf(ErrEmpty, "MHA weights have DModel %d, KDim %d, VDim %d, KVDim %d: all must be at least 1", d, kd, vd, kv)
	}
	packed := w.InProjWeight != nil
	separate := w.QProjWeight != nil || w.KProjWeight != nil || w.VProjWeight != nil
	switch {
	case packed && separate:
		return Errorf(ErrShape, "MHA weights have both in_proj_weight and q/k/v_proj_weight")
	case !packed && !separate:
		return Errorf(ErrShape, "MHA weights have neither in_proj_weight nor q/k/v_proj_weight")
	case packed && (kd != d || vd != d || kv != d):
		return Errorf(ErrShape, "packed in_proj_weight needs kdim = vdim = K/V width = embed_dim %d, have kdim %d, vdim %d, K/V width %d (use q/k/v_proj_weight)", d, kd, vd, kv)
	}
	var ts []namedTensor
	for _, p := range w.Params() {
		ts = append(ts, namedTensor{p.Name, p.Values, p.Shape, p.Optional})
	}
	return checkTensors(ts)
}

// Param is one parameter of a layer: its state_dict name, shape and
// values (nil for an optional bias the layer does not have).
type Param struct {
	Name     string
	Shape    []int
	Values   []float32
	Optional bool // a bias, which a layer may lack
}

// Params are the layer's parameters in state_dict order, those of its
// weight layout: in_proj_weight or q/k/v_proj_weight, in_proj_bias,
// out_proj.weight, out_proj.bias.
func (w *MHAWeights) Params() []Param {
	d, kd, vd, kv := w.DModel, w.KDim, w.VDim, w.KVOut()
	var ps []Param
	if w.InProjWeight != nil {
		ps = append(ps, Param{"in_proj_weight", []int{3 * d, d}, w.InProjWeight, false})
	} else {
		ps = append(ps, Param{"q_proj_weight", []int{d, d}, w.QProjWeight, false},
			Param{"k_proj_weight", []int{kv, kd}, w.KProjWeight, false},
			Param{"v_proj_weight", []int{kv, vd}, w.VProjWeight, false})
	}
	return append(ps, Param{"in_proj_bias", []int{d + 2*kv}, w.InProjBias, true},
		Param{"out_proj.weight", []int{d, d}, w.OutProjWeight, false},
		Param{"out_proj.bias", []int{d}, w.OutProjBias, true})
}

// Projections returns W_q, W_k, W_v and b_q, b_k, b_v (nil without bias)
// for either layout, as slices of the weights' own storage; Check must have
// passed.
func (w *MHAWeights) Projections() (wq, wk, wv, bq, bk, bv []float32) {
	d := w.DModel
	if w.InProjWeight != nil {
		wq, wk, wv = w.InProjWeight[:d*d], w.InProjWeight[d*d:2*d*d], w.InProjWeight[2*d*d:]
	} else {
		wq, wk, wv = w.QProjWeight, w.KProjWeight, w.VProjWeight
	}
	if kv := w.KVOut(); w.InProjBias != nil {
		bq, bk, bv = w.InProjBias[:d], w.InProjBias[d:d+kv], w.InProjBias[d+kv:]
	}
	return
}

// KVOut is the output width of the K and V projections: KVDim, or DModel
// when KVDim is 0.
func (w *MHAWeights) KVOut() int {
	if w.KVDim == 0 {
		return w.DModel
	}
	return w.KVDim
}

// KVHeads is the number of K/V heads for heads query heads (heads when
// KVDim is 0), or an error wrapping ErrHeads when the widths do not divide.
func (w *MHAWeights) KVHeads(heads int) (int, error) {
	return KVHeadCount(w.DModel, w.KVOut(), heads)
}

// KVHeadCount is the number of K/V heads of K/V projections kv wide for
// heads query heads of a d-wide layer, or an error wrapping ErrHeads.
func KVHeadCount(d, kv, heads int) (int, error) {
	if heads <= 0 || d%heads != 0 {
		return 0, Errorf(ErrHeads, "%d heads do not divide embed_dim %d", heads, d)
	}
	dh := d / heads
	if kv%dh != 0 || heads%(kv/dh) != 0 {
		return 0, Errorf(ErrHeads, "K/V width %d is not a number of %d-wide heads dividing the %d query heads", kv, dh, heads)
	}
	return kv / dh, nil
}

// KeyPadding is PyTorch's boolean key_padding_mask: Padded is (B, S)
// row-major and Padded[b*S+j] is true where key j of batch item b is padding,
// ignored by every head and query. The field name carries the sense.
type KeyPadding struct {
	Padded []bool
}

// MHAOptions configure a multi-head attention layer (the float64 oracle is
// reference.MultiHeadAttention).
type MHAOptions struct {
	// Heads is PyTorch's num_heads; it must divide DModel. Each head has
	// width DModel/Heads and the default scale 1/sqrt(DModel/Heads).
	Heads int
	// KeyPadding, if not nil, masks padded keys (PyTorch key_padding_mask).
	KeyPadding *KeyPadding
	// Attention holds what applies to every head's attention, with exactly
	// the semantics of Attention: Mask and BoolMasks broadcast over
	// (B, Heads, T, S) (PyTorch's (T,S) attn_mask is MaskShape{1,1,T,S}, its
	// (B*Heads,T,S) one MaskShape{B,Heads,T,S}; its boolean attn_mask is a
	// TrueBlocks mask), Causal, KeyLengths, QueryLengths and Scale.
	// WantLSE and WantWeights are ignored.
	Attention Options
	// NeedWeights asks for the per-head attention weights and their mean
	// over heads (reference.MHAResult's Weights and AvgWeights; PyTorch
	// need_weights with average_attn_weights False and True).
	NeedWeights bool
}

// AdditiveWeights are the parameters of additive (Bahdanau) attention,
// SEMANTICS.md §12:
//
//	e_{t,j} = tanh(q_t W_q + k_j W_k + b) . w_a
//
// with row vectors q_t and k_j, so W_q and W_k are (in, out) row-major, not
// PyTorch's (out, in). One set is shared by every position.
type AdditiveWeights struct {
	// DQ and DK are the query and key widths, DA the attention width.
	DQ, DK, DA int
	WQ         []float32 // W_q, (DQ, DA)
	WK         []float32 // W_k, (DK, DA)
	Bias       []float32 // b, (DA); nil means zero
	WA         []float32 // w_a, (DA)
}

// Check reports whether every tensor has its dimensions' size (errors name
// the tensor and both shapes, wrapping ErrShape) and is finite
// (ErrNonFinite). Nil weights are ErrShape.
func (w *AdditiveWeights) Check() error {
	if w == nil {
		return Errorf(ErrShape, "additive weights are nil")
	}
	if w.DQ <= 0 || w.DK <= 0 || w.DA <= 0 {
		return Errorf(ErrEmpty, "additive weights have DQ %d, DK %d, DA %d: all must be at least 1", w.DQ, w.DK, w.DA)
	}
	return checkTensors([]namedTensor{
		{"W_q", w.WQ, []int{w.DQ, w.DA}, false},
		{"W_k", w.WK, []int{w.DK, w.DA}, false},
		{"b", w.Bias, []int{w.DA}, true},
		{"w_a", w.WA, []int{w.DA}, false},
	})
}

// namedTensor is a weight tensor with its PyTorch name, for shape errors.
type namedTensor struct {
	name     string
	data     []float32
	shape    []int
	optional bool
}

// checkTensors checks each tensor's value count against its shape and that
// every value is finite; a nil optional tensor is fine.
func checkTensors(ts []namedTensor) error {
	for _, t := range ts {
		if t.data == nil && t.optional {
			continue
		}
		n := 1
		for _, s := range t.shape {
			n *= s
		}
		if len(t.data) != n {
			return Errorf(ErrShape, "%s has %d values, want shape %v (%d values)", t.name, len(t.data), t.shape, n)
		}
		if i := FirstNonFinite(t.data); i >= 0 {
			return Errorf(ErrNonFinite, "%s value %d is %v", t.name, i, t.data[i])
		}
	}
	return nil
}
