package reference

import (
	"fmt"

	"github.com/vkattn/vkattn/core"
)

// MHAGradients are the gradients of sum(Out * dOut) for a
// MultiHeadAttention layer, in float64, each of the shape of what it is
// the gradient of.
type MHAGradients struct {
	// DX is the query input's, (B,T,DModel); for self-attention it
	// includes what flows through K and V, and DKey and DValue are nil.
	DX, DKey, DValue []float64
	// The parameters', named as PyTorch names them: in_proj_weight (or
	// q_proj_weight, k_proj_weight, v_proj_weight, as the weights are
	// laid out), in_proj_bias, out_proj.weight, out_proj.bias; nil where
	// the layer has no such parameter.
	InProjWeight, QProjWeight, KProjWeight, VProjWeight []float64
	InProjBias, OutProjWeight, OutProjBias              []float64
}

// Params are the parameters' gradients by their state_dict names, those
// the layer has.
func (g *MHAGradients) Params() map[string][]float64 {
	ps := map[string][]float64{}
	for name, x := range map[string][]float64{"in_proj_weight": g.InProjWeight, "q_proj_weight": g.QProjWeight,
		"k_proj_weight": g.KProjWeight, "v_proj_weight": g.VProjWeight, "in_proj_bias": g.InProjBias,
		"out_proj.weight": g.OutProjWeight, "out_proj.bias": g.OutProjBias} {
		if x != nil {
			ps[name] = x
		}
	}
	return ps
}

// MultiHeadAttentionBackward returns the gradients of sum(Out * dOut)
// for Out = MultiHeadAttention(x, key, value, w, opts): dOut has Out's
// shape (B,T,DModel). The projections' gradients are the chain rule
// through the dense layers around reference.AttentionBackward of each
// head; the masks and key padding are constants.
func MultiHeadAttentionBackward(x []float32, xShape []int, key []float32, keyShape []int, value []float32, valueShape []int, w *core.MHAWeights, dOut []float32, opts core.MHAOptions) (*MHAGradients, error) {
	self := key == nil
	res, err := MultiHeadAttention(x, xShape, key, keyShape, value, valueShape, w, opts)
	if err != nil {
		return nil, err
	}
	if self {
		key, value = x, x
	}
	B, T, S, d, h := res.B, res.T, res.S, res.DModel, res.Heads
	dh, kv := d/h, w.KVOut()
	if len(dOut) != B*T*d {
		return nil, fmt.Errorf("%w: dOut has %d values, want (B,T,DModel) = %d", core.ErrShape, len(dOut), B*T*d)
	}
	if i := core.FirstNonFinite(dOut); i >= 0 {
		return nil, fmt.Errorf("%w: dOut value %d is %v", core.ErrNonFinite, i, dOut[i])
	}
	g := &MHAGradients{}
	dY := widen(dOut)
	// Out = Concat W_o^T + b_o.
	var dConcat []float64
	g.OutProjWeight, g.OutProjBias, dConcat = core.LinearBackward(dY, res.Concat, B*T, d, d, w.OutProjWeight, w.OutProjBias != nil)
	// The heads: dO of each, in float32 as the forward's attention reads.
	dO := make([]float32, len(dConcat))
	for i, v := range splitHeadsF64(dConcat, B, T, h, dh) {
		dO[i] = float32(v)
	}
	qShape, kvShape := [4]int{B, h, T, dh}, [4]int{B, res.hkv, S, dh}
	ag, err := AttentionBackward(splitHeads(res.Q, B, T, h, dh), qShape, splitHeads(res.K, B, S, res.hkv, dh), kvShape,
		splitHeads(res.V, B, S, res.hkv, dh), kvShape, dO, res.attnOpts)
	if err != nil {
		return nil, err
	}
	dQ, dK, dV := mergeHeads(ag.DQ, B, T, h, dh), mergeHeads(ag.DK, B, S, res.hkv, dh), mergeHeads(ag.DV, B, S, res.hkv, dh)
	wq, wk, wv, _, _, _ := w.Projections()
	bias := w.InProjBias != nil
	dWq, dbq, dx := core.LinearBackward(dQ, widen(x), B*T, d, d, wq, bias)
	dWk, dbk, dkey := core.LinearBackward(dK, widen(key), B*S, w.KDim, kv, wk, bias)
	dWv, dbv, dvalue := core.LinearBackward(dV, widen(value), B*S, w.VDim, kv, wv, bias)
	if self {
		for i := range dx {
			dx[i] += dkey[i] + dvalue[i]
		}
	} else {
		g.DKey, g.DValue = dkey, dvalue
	}
	g.DX = dx
	if w.InProjWeight != nil {
		g.InProjWeight = append(append(dWq, dWk...), dWv...)
	} else {
		g.QProjWeight, g.KProjWeight, g.VProjWeight = dWq, dWk, dWv
	}
	if bias {
		g.InProjBias = append(append(dbq, dbk...), dbv...)
	}
	return g, nil
}

// splitHeadsF64 is splitHeads of float64 data.
func splitHeadsF64(x []float64, B, T, h, dh int) []float64 { return swapAxes12(x, B, T, h, dh) }
