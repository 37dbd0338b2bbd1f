//go:build cgo

package weights

// The one test of this package that needs a Vulkan device (cgo and a
// driver): without cgo the package tests run with no driver at all.

import (
	"encoding/binary"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/testutil"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/nn"
	"github.com/x448/float16"
)

// MHA weights stored as float16 (.npz <f2, safetensors F16) or bfloat16
// (safetensors BF16) stay half on the device, and the layer gives the
// output of the same weights as float32.
func TestHalfMHAWeightsOnDevice(t *testing.T) {
	const d, heads, T = 8, 2, 5
	r := rand.New(rand.NewSource(3))
	// Values with 8 significant bits and |x| >= 2^-10: exact in bfloat16
	// (their low 16 bits are zero) and in float16.
	exact := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			v := float32(math.Copysign(math.Ldexp(1+r.Float64(), -r.Intn(10)), r.Float64()-0.5))
			x[i] = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
		}
		return x
	}
	ts := map[string]Tensor{
		"in_proj_weight":  {Shape: []int{3 * d, d}, Data: exact(3 * d * d)},
		"in_proj_bias":    {Shape: []int{3 * d}, Data: exact(3 * d)},
		"out_proj.weight": {Shape: []int{d, d}, Data: exact(d * d)},
		"out_proj.bias":   {Shape: []int{d}, Data: exact(d)},
	}
	halves := func(dtype string, x []float32) []byte {
		raw := make([]byte, 2*len(x))
		for i, v := range x {
			h := float16.Fromfloat32(v).Bits()
			if dtype == "BF16" {
				h = uint16(math.Float32bits(v) >> 16)
			}
			binary.LittleEndian.PutUint16(raw[2*i:], h)
		}
		return raw
	}
	npz32, npz16 := map[string][]byte{}, map[string][]byte{}
	st16, stBF := map[string]stTensor{}, map[string]stTensor{}
	for name, x := range ts {
		npz32[name], npz16[name] = f32NPY(x.Shape, x.Data), halfNPY(x.Shape, x.Data)
		st16[name] = stTensor{"F16", x.Shape, halves("F16", x.Data)}
		stBF[name] = stTensor{"BF16", x.Shape, halves("BF16", x.Data)}
	}
	files := []struct {
		name, path string
		dtype      vkattn.DType
	}{
		{"npz f32", writeFile(t, "w.npz", testutil.NPZ(npz32, false)), vkattn.Float32},
		{"npz f16", writeFile(t, "w.npz", testutil.NPZ(npz16, true)), vkattn.Float16},
		{"safetensors F16", writeFile(t, "w16.safetensors", stBytes(st16)), vkattn.Float16},
		{"safetensors BF16", writeFile(t, "wbf.safetensors", stBytes(stBF)), vkattn.BFloat16},
	}
	dev, err := vkattn.Open(vkattn.Config{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	xs := random.Uniform(r, T*d)
	x, err := dev.Upload([]int{1, T, d}, xs)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var want []float32
	for _, f := range files {
		w, err := LoadMHA(f.path, d, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if w.DType != f.dtype {
			t.Fatalf("%s: weights kept as %v, want %v", f.name, w.DType, f.dtype)
		}
		m, err := nn.NewMHA(dev, w)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(x, nil, nil, nn.MHAOptions{Heads: heads})
		if err != nil {
			t.Fatal(err)
		}
		got, err := out.Out.Download()
		if plan := out.Plan.OutProj.String(); f.dtype != vkattn.Float32 && !strings.Contains(plan, "W "+f.dtype.String()) {
			t.Errorf("%s: out_proj plan %q does not say it reads %v weights", f.name, plan, f.dtype)
		}
		out.Close()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
			continue
		}
		for i := range want {
			if w := float64(want[i]); !verdict.Near(float64(got[i]), w, 2e-5*max(1, math.Abs(w))) {
				t.Fatalf("%s: out[%d] = %v, float32 weights give %v", f.name, i, got[i], want[i])
			}
		}
	}
	if msgs := vkattn.ValidationMessages(); len(msgs) > 0 {
		t.Fatalf("validation messages: %v", msgs)
	}
}
