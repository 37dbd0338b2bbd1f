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
