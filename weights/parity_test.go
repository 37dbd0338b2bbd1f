//go:build !fuzzing

// Like npyio_test.go, left out of the fuzzing build: the float64 reference
// would bring gonum into it.

package weights

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/reference"
)

// PyTorch parity: testdata/mha/ holds nn.MultiheadAttention cases written
// by tools/mha_parity.py (which says how to regenerate them); here the Go
// loaders read them and the float64 reference must reproduce PyTorch's
// outputs and attention weights to 1e-5.
var parityCases = []struct {
	name               string
	heads              int
	dModel, kdim, vdim int
}{
	{"self", 2, 8, 8, 8},         // SEMANTICS.md §11 walk-through shapes, packed weights
	{"cross", 2, 8, 5, 6},        // kdim, vdim != d: q/k/v_proj_weight
	{"padcausal", 3, 12, 12, 12}, // key padding + causal boolean attn_mask
	{"mask3d", 4, 16, 16, 16},    // (B*h,T,S) additive attn_mask + key padding, no biases
}

const parityTol = 1e-5

func TestPyTorchParity(t *testing.T) {
	dir := filepath.Join("..", "testdata", "mha")
	for _, c := range parityCases {
		t.Run(c.name, func(t *testing.T) {
			data := mustLoad(t, filepath.Join(dir, c.name+".npz"))
			wNPZ, err := LoadMHA(filepath.Join(dir, c.name+"_params.npz"), c.dModel, c.kdim, c.vdim)
			if err != nil {
				t.Fatal(err)
			}
			wST, err := LoadMHA(filepath.Join(dir, c.name+"_params.safetensors"), c.dModel, c.kdim, c.vdim)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(wNPZ, wST) {
				t.Fatal("the .npz and .safetensors weights differ")
			}
			if (wNPZ.InProjWeight != nil) != (c.kdim == c.dModel && c.vdim == c.dModel) {
				t.Fatalf("packed layout %v for kdim %d vdim %d", wNPZ.InProjWeight != nil, c.kdim, c.vdim)
			}

			q := data["query"]
			B, T := q.Shape[0], q.Shape[1]
			var k, v []float32
			var ks, vs []int
			if kt, ok := data["key"]; ok {
				k, ks, v, vs = kt.Data, kt.Shape, data["value"].Data, data["value"].Shape
			}
			S := T
			if ks != nil {
				S = ks[1]
			}
			opts, err := MHAOptions(data, c.heads, B, T, S)
			if err != nil {
				t.Fatal(err)
			}
			opts.NeedWeights = true
			res, err := reference.MultiHeadAttention(q.Data, q.Shape, k, ks, v, vs, wNPZ, opts)
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got []float64, want Tensor, shape ...int) {
				t.Helper()
				if !reflect.DeepEqual(want.Shape, shape) || len(got) != len(want.Data) {
					t.Fatalf("%s: PyTorch shape %v (%d values), reference %v (%d values)", what, want.Shape, len(want.Data), shape, len(got))
				}
				worst := testutil.Near(t, what+" against PyTorch's", got, want.Data, parityTol)
				t.Logf("%s: max |reference - PyTorch| = %.2g", what, worst)
			}
			check("out", res.Out, data["out"], B, T, c.dModel)
			check("weights", res.Weights, data["weights"], B, c.heads, T, S)
			check("weights_avg", res.AvgWeights, data["weights_avg"], B, T, S)

			// PyTorch's causal boolean mask is vkattn's top-left causal.
			if c.name == "padcausal" {
				opts.Attention.BoolMasks, opts.Attention.Causal = nil, core.CausalTopLeft
				res, err := reference.MultiHeadAttention(q.Data, q.Shape, k, ks, v, vs, wNPZ, opts)
				if err != nil {
					t.Fatal(err)
				}
				check("out (Causal)", res.Out, data["out"], B, T, c.dModel)
			}
		})
	}
}
