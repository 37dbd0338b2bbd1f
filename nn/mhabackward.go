package nn

import (
	"context"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
)

// MHAGradients are an MHA layer's gradients of sum(Out * dY) (float32,
// dense, row-major): of its inputs, with the shapes Forward took them in
// (DKey and DValue nil for self-attention, whose DX includes what flows
// through K and V), and of its parameters, by the names PyTorch's
// state_dict gives them: in_proj_weight or q_proj_weight, k_proj_weight,
// v_proj_weight; in_proj_bias; out_proj.weight; out_proj.bias (those the
// layer has).
type MHAGradients struct {
	DX, DKey, DValue []float32
	Params           map[string][]float32
}

// Backward returns the gradients of sum(Out * dY) for Out = m.Forward(x,
// key, value, opts) (SEMANTICS.md §16): dY has Out's shape. Every head's
// attention, forward and backward, runs on the device
// (Device.AttentionBackward, with the layer's masks and key padding); the
// dense layers around it are differentiated on the host in float64 (dW =
// dy^T x, db, dx = dy W) and rounded to float32. NeedWeights is ignored.
func (m *MHA) Backward(x, key, value, dY *vkattn.Tensor, opts MHAOptions) (*MHAGradients, error) {
	return m.BackwardContext(context.Background(), x, key, value, dY, opts)
}

// BackwardContext is Backward with a context that can cancel the wait.
func (m *MHA) BackwardContext(ctx context.Context, x, key, value, dY *vkattn.Tensor, opts MHAOptions) (*MHAGradients, error) {
	self := key == nil && value == nil
	if self {
		key, value = x, x
	}
	for _, t := range []struct {
		name string
		t    *vkattn.Tensor
	}{{"query", x}, {"key", key}, {"value", value}, {"dY", dY}} {
		if err := engine.CheckInput(m.dev, t.name, t.t); err != nil {
			return nil, err
		}
	}
	B, T, err := mhaInput("query", x, m.dModel, "embed_dim")
	if err != nil {
		return nil, err
	}
	bk, S, err := mhaInput("key", key, m.kdim, "kdim")
	if err != nil {
		return nil, err
	}
	bv, sv, err := mhaInput("value", value, m.vdim, "vdim")
	if err != nil {
		return nil, err
	}
	if _, _, err := mhaInput("dY", dY, m.dModel, "embed_dim"); err != nil {
		return nil, err
	}
	if dY.Shape() != x.Shape() {
		return nil, core.Errorf(vkattn.ErrShape, "dY has shape %v, want Out's %v", dY.Shape(), x.Shape())
	}
	opts.NeedWeights = false
	pr, err := m.problem([3][2]int{{B, T}, {bk, S}, {bv, sv}}, [3]vkattn.DType{x.DType(), key.DType(), value.DType()}, self, &opts)
	if err != nil {
		return nil, err
	}
	w, err := m.hostWeights()
	if err != nil {
		return nil, err
	}
	var in [4][]float64
	for i, t := range []*vkattn.Tensor{x, key, value, dY} {
		data, err := t.Download()
		if err != nil {
			return nil, err
		}
		in[i] = widen64(data)
	}
	d, h, kv := m.dModel, opts.Heads, m.kvOut
	dh, hkv := d/h, kv/(d/h)
	wq, wk, wv, bq, bk32, bv32 := w.Projections()
	// The projections, rounded to float32 as the device keeps them.
	proj := func(x []float64, rows, inW int, wt, b []float32, out int) []float32 {
		return narrow32(core.Linear(x, rows, inW, wt, b, out))
	}
	q, k, v := proj(in[0], B*T, d, wq, bq, d), proj(in[1], B*S, m.kdim, wk, bk32, kv), proj(in[2], B*S, m.vdim, wv, bv32, kv)
	heads, free, err := m.headViews(q, k, v, B, T, S, h, hkv, dh)
	if err != nil {
		return nil, err
	}
	defer free()
	attn := headOptions(&pr.attn, opts.KeyPadding, B, S)
	// Out = concat W_o^T + b_o: the concatenation's gradient, and W_o's.
	concat, err := m.headsConcat(ctx, heads, B, T, h, dh, &attn)
	if err != nil {
		return nil, err
	}
	g := &MHAGradients{Params: map[string][]float32{}}
	dWo, dbo, dConcat := core.LinearBackward(in[3], concat, B*T, d, d, w.OutProjWeight, w.OutProjBias != nil)
	g.Params["out_proj.weight"] = narrow32(dWo)
	if dbo != nil {
		g.Params["out_proj.bias"] = narrow32(dbo)
	}
	// The heads, on the device.
	dQ, dK, dV, err := m.headsBackward(ctx, heads, narrow32(dConcat), B, T, S, h, hkv, dh, &attn)
	if err != nil {
		return nil, err
	}
	bias := w.InProjBias != nil
	dWq, dbq, dx := core.LinearBackward(dQ, in[0], B*T, d, d, wq, bias)
	dWk, dbk, dkey := core.LinearBackward(dK, in[1], B*S, m.kdim, kv, wk, bias)
	dWv, dbv, dvalue := core.LinearBackward(dV, in[2], B*S, m.vdim, kv, wv, bias)
	if self {
		for i := range dx {
			dx[i] += dkey[i] + dvalue[i]
		}
	} else {
		g.DKey, g.DValue = narrow32(dkey), narrow32(dvalue)
	}
	g.DX = narrow32(dx)
	if m.packed {
		g.Params["in_proj_weight"] = narrow32(append(append(dWq, dWk...), dWv...))
	} else {
		g.Params["q_proj_weight"], g.Params["k_proj_weight"], g.Params["v_proj_weight"] = narrow32(dWq), narrow32(dWk), narrow32(dWv)
	}
	if bias {
		g.Params["in_proj_bias"] = narrow32(append(append(dbq, dbk...), dbv...))
	}
	return g, nil
}

// headOptions are the heads' attention options with the key padding
// folded in as one more boolean mask, (B,1,1,S), true = padded.
func headOptions(attn *vkattn.Options, kp *KeyPadding, B, S int) vkattn.Options {
	o := *attn
	o.WantLSE, o.WantWeights = false, false
	if kp != nil {
		o.BoolMasks = append(append([]vkattn.BoolMask(nil), o.BoolMasks...), vkattn.BoolMask{Shape: vkattn.MaskShape{B, 1, 1, S}, Values: kp.Padded, Meaning: vkattn.TrueBlocks})
	}
	return o
}

// headViews uploads the projections (B, T|S, heads, dh) and returns them
// as (B, heads, T|S, dh) views, the heads split.
func (m *MHA) headViews(q, k, v []float32, B, T, S, h, hkv, dh int) ([3]*vkattn.Tensor, func(), error) {
	var ts [3]*vkattn.Tensor
	free := func() {
		for _, t := range ts {
			t.Close()
		}
	}
	for i, x := range []struct {
		data     []float32
		n, heads int
	}{{q, T, h}, {k, S, hkv}, {v, S, hkv}} {
		t, err := m.dev.Upload([]int{B, x.n, x.heads, dh}, x.data)
		if err != nil {
			free()
			return ts, nil, err
		}
		ts[i] = t.SwapAxes12()
	}
	return ts, free, nil
}

// headsConcat is the heads' attention output merged, (B, T, d) in float64.
func (m *MHA) headsConcat(ctx context.Context, heads [3]*vkattn.Tensor, B, T, h, dh int, attn *vkattn.Options) ([]float64, error) {
	out, err := m.dev.AttentionContext(ctx, heads[0], heads[1], heads[2], *attn)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	o, err := out.O.Download()
	if err != nil {
		return nil, err
	}
	return widen64(core.SwapAxes12(o, B, h, T, dh)), nil
}

// headsBackward is the heads' attention backward on the device for the
// concatenation's gradient dConcat (B, T, d): dQ (B, T, d), dK and dV
// (B, S, kv), in float64.
func (m *MHA) headsBackward(ctx context.Context, heads [3]*vkattn.Tensor, dConcat []float32, B, T, S, h, hkv, dh int, attn *vkattn.Options) (dQ, dK, dV []float64, err error) {
	dO, err := m.dev.Upload([]int{B, h, T, dh}, core.SwapAxes12(dConcat, B, T, h, dh))
	if err != nil {
		return nil, nil, nil, err
	}
	defer dO.Close()
	g, err := m.dev.AttentionBackwardContext(ctx, heads[0], heads[1], heads[2], dO, *attn)
	if err != nil {
		return nil, nil, nil, err
	}
	defer g.Close()
	var out [3][]float64
	for i, x := range []struct {
		t        *vkattn.Tensor
		n, heads int
	}{{g.DQ, T, h}, {g.DK, S, hkv}, {g.DV, S, hkv}} {
		data, err := x.t.Download()
		if err != nil {
			return nil, nil, nil, err
		}
		out[i] = widen64(core.SwapAxes12(data, B, x.heads, x.n, dh))
	}
	return out[0], out[1], out[2], nil
}

// hostWeights are the layer's weights as the device holds them.
func (m *MHA) hostWeights() (*MHAWeights, error) {
	w := &MHAWeights{DModel: m.dModel, KDim: m.kdim, VDim: m.vdim}
	if m.kvOut != m.dModel {
		w.KVDim = m.kvOut
	}
	for _, t := range []struct {
		dst *[]float32
		t   *vkattn.Tensor
	}{{&w.InProjWeight, m.inW}, {&w.QProjWeight, m.qW}, {&w.KProjWeight, m.kW}, {&w.VProjWeight, m.vW},
		{&w.InProjBias, m.inB}, {&w.OutProjWeight, m.outW}, {&w.OutProjBias, m.outB}} {
		if t.t == nil {
			continue
		}
		var err error
		if *t.dst, err = t.t.Download(); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func widen64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func narrow32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}
