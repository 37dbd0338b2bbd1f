package main

import (
	"math/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
)

// mha --dout --grads writes every gradient of the layer, named as its
// state_dict and its inputs, equal to the float64 reference's: a packed
// self-attention layer with a causal mask, and cross-attention with
// separate weights and key padding (kv the key's and value's sum).
func TestMHAGrads(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewSource(160))
	dir := t.TempDir()
	const B, T, S, d, kdim = 2, 5, 6, 8, 12
	vals := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 0.4)
		}
		return x
	}
	self := &vkattn.MHAWeights{DModel: d, KDim: d, VDim: d, InProjWeight: vals(3 * d * d), InProjBias: vals(3 * d), OutProjWeight: vals(d * d), OutProjBias: vals(d)}
	selfParams := writeNPZ(t, dir, "self.npz", map[string]any{
		"in_proj_weight": rows(self.InProjWeight, d), "in_proj_bias": self.InProjBias,
		"out_proj.weight": rows(self.OutProjWeight, d), "out_proj.bias": self.OutProjBias,
	})
	crossParams, cross := randomCross(t, r, dir, d, kdim)
	x := vals(B * T * d)
	kv := vals(B * S * kdim)
	dY := vals(B * T * d)
	xPath := writeArray(t, dir, "x.npy", []int{B, T, d}, x)
	kvPath := writeArray(t, dir, "kv.npy", []int{B, S, kdim}, kv)
	dyPath := writeArray(t, dir, "dy.npy", []int{B, T, d}, dY)
	padded := make([]bool, B*S)
	padded[4], padded[S+1] = true, true
	padPath := save(t, dir, "pad.npy", rows(padded, S))
	for _, c := range []struct {
		name   string
		args   []string
		w      *vkattn.MHAWeights
		kv     []float32
		opts   vkattn.MHAOptions
		params []string
	}{
		{"self, causal", []string{"--params", selfParams, "--causal", "top-left"}, self, nil,
			vkattn.MHAOptions{Heads: 2, Attention: vkattn.Options{Causal: vkattn.CausalTopLeft}},
			[]string{"x", "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}},
		{"cross, key padding", []string{"--params", crossParams, "--kv", kvPath, "--key-padding", padPath}, cross, kv,
			vkattn.MHAOptions{Heads: 2, KeyPadding: &vkattn.KeyPadding{Padded: padded}},
			[]string{"x", "kv", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := filepath.Join(t.TempDir(), "g.npz")
			cliOK(t, append([]string{"mha", "-x", xPath, "--heads", "2", "-o", filepath.Join(t.TempDir(), "out.npy"), "--dout", dyPath, "--grads", g, "--check"}, c.args...)...)
			got, err := weights.Load(g)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			slices.Sort(names)
			want := slices.Clone(c.params)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Fatalf("members %v, want %v", names, want)
			}
			var kvShape []int
			if c.kv != nil {
				kvShape = []int{B, S, kdim}
			}
			ref, err := reference.MultiHeadAttentionBackward(x, []int{B, T, d}, c.kv, kvShape, c.kv, kvShape, c.w, dY, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			refs := map[string][]float64{"x": ref.DX, "in_proj_weight": ref.InProjWeight, "q_proj_weight": ref.QProjWeight,
				"k_proj_weight": ref.KProjWeight, "v_proj_weight": ref.VProjWeight, "in_proj_bias": ref.InProjBias,
				"out_proj.weight": ref.OutProjWeight, "out_proj.bias": ref.OutProjBias}
			if c.kv != nil {
				sum := make([]float64, len(ref.DKey))
				for i := range sum {
					sum[i] = ref.DKey[i] + ref.DValue[i]
				}
				refs["kv"] = sum
			}
			for _, n := range c.params {
				within(t, n, got[n].Data, refs[n])
			}
			if s := got["x"].Shape; !slices.Equal(s, []int{B, T, d}) {
				t.Errorf("x gradient of shape %v", s)
			}
		})
	}
	checkRefused(t, []string{"mha", "-x", xPath, "--params", selfParams, "--heads", "2", "-o", filepath.Join(dir, "o.npy"), "--dout", dyPath}, 2, "go together", "")
}

// additive --dout --grads writes q, k, v, W_q, W_k, b and w_a's gradients
// equal to the float64 reference's, with a causal mask and key lengths.
func TestAdditiveGrads(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewSource(161))
	dir := t.TempDir()
	const B, L, S, dq, dk, da, dv = 2, 3, 5, 4, 3, 6, 2
	w := &vkattn.AdditiveWeights{DQ: dq, DK: dk, DA: da,
		WQ: randomValues(r, dq*da), WK: randomValues(r, dk*da), Bias: randomValues(r, da), WA: randomValues(r, da)}
	params := writeNPZ(t, dir, "p.npz", map[string]any{"W_q": rows(w.WQ, da), "W_k": rows(w.WK, da), "b": w.Bias, "w_a": rows(w.WA, 1)})
	qd, kd, vd, dO := randomValues(r, B*L*dq), randomValues(r, B*S*dk), randomValues(r, B*S*dv), randomValues(r, B*L*dv)
	q := writeArray(t, dir, "q.npy", []int{B, L, dq}, qd)
	k := writeArray(t, dir, "k.npy", []int{B, S, dk}, kd)
	v := writeArray(t, dir, "v.npy", []int{B, S, dv}, vd)
	do := writeArray(t, dir, "do.npy", []int{B, L, dv}, dO)
	g := filepath.Join(dir, "g.npz")
	cliOK(t, "additive", "-q", q, "-k", k, "-v", v, "--params", params, "--causal", "bottom-right", "--key-lengths", "5,2",
		"-o", filepath.Join(dir, "o.npy"), "--dout", do, "--grads", g, "--check")
	got, err := weights.Load(g)
	if err != nil {
		t.Fatal(err)
	}
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{5, 2}}
	ref, err := reference.AdditiveAttentionBackward(qd, [3]int{B, L, dq}, kd, [3]int{B, S, dk}, vd, [3]int{B, S, dv}, w, dO, opts)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]float64{"q": ref.DQ, "k": ref.DK, "v": ref.DV, "W_q": ref.DWQ, "W_k": ref.DWK, "b": ref.DBias, "w_a": ref.DWA} {
		m, ok := got[name]
		if !ok {
			t.Fatalf("no member %s in %v", name, got)
		}
		within(t, name, m.Data, want)
	}
	if len(got) != 7 {
		t.Errorf("%d members, want 7", len(got))
	}
}
