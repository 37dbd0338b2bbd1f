package vkattn_test

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// TestInvalidInputs: every kind of invalid input gives its typed error,
// never a panic.
func TestInvalidInputs(t *testing.T) {
	up := func(shape ...int) *vkattn.Tensor { return devtest.Zeros(t, devtest.Dev, shape...) }
	q, k, v := up(2, 4, 3, 8), up(2, 2, 5, 8), up(2, 2, 5, 6)
	k3 := up(2, 3, 5, 8)
	v3 := up(2, 3, 5, 6)
	kWide := up(2, 2, 5, 9)
	vShort := up(2, 2, 4, 6)
	kBatch := up(1, 2, 5, 8)
	huge := up(1, 1, 1, vkattn.MaxHeadWidth+1)
	nanData, infData := make([]float32, 2*4*3*8), make([]float32, 2*2*5*8)
	nanData[17], infData[3] = float32(math.NaN()), float32(math.Inf(1))
	nan, inf := devtest.Upload(t, devtest.Dev, []int{2, 4, 3, 8}, nanData), devtest.Upload(t, devtest.Dev, []int{2, 2, 5, 8}, infData)
	closed := up(2, 4, 3, 8)
	closed.Close()

	full := vkattn.MaskShape{2, 4, 3, 5}
	cases := []struct {
		name    string
		q, k, v *vkattn.Tensor
		opts    vkattn.Options
		want    error
	}{
		{"d_k mismatch", q, kWide, v, vkattn.Options{}, vkattn.ErrShape},
		{"K and V lengths differ", q, k, vShort, vkattn.Options{}, vkattn.ErrShape},
		{"batch mismatch", q, kBatch, v, vkattn.Options{}, vkattn.ErrShape},
		{"H_kv does not divide H", q, k3, v3, vkattn.Options{}, vkattn.ErrHeads},
		{"K and V heads differ", q, k, v3, vkattn.Options{}, vkattn.ErrHeads},
		{"nil tensor", q, nil, v, vkattn.Options{}, vkattn.ErrShape},
		{"mask not broadcastable", q, k, v, vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 2, 5}, Values: make([]float32, 10)}}, vkattn.ErrMask},
		{"mask value count", q, k, v, vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 1, 5}, Values: make([]float32, 4)}}, vkattn.ErrMask},
		{"mask holds NaN", q, k, v, vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 1, 5}, Values: []float32{0, 0, float32(math.NaN()), 0, 0}}}, vkattn.ErrMask},
		{"mask holds +Inf", q, k, v, vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 1, 5}, Values: []float32{0, float32(math.Inf(1)), 0, 0, 0}}}, vkattn.ErrMask},
		{"bool mask meaning unset", q, k, v, vkattn.Options{BoolMasks: []vkattn.BoolMask{{Shape: full, Values: make([]bool, 2*4*3*5)}}}, vkattn.ErrMask},
		{"bool mask not broadcastable", q, k, v, vkattn.Options{BoolMasks: []vkattn.BoolMask{{Shape: vkattn.MaskShape{2, 2, 3, 5}, Values: make([]bool, 60), Meaning: vkattn.TrueAllows}}}, vkattn.ErrMask},
		{"key length too long", q, k, v, vkattn.Options{KeyLengths: []int{5, 6}}, vkattn.ErrLengths},
		{"key length negative", q, k, v, vkattn.Options{KeyLengths: []int{-1, 2}}, vkattn.ErrLengths},
		{"key lengths count", q, k, v, vkattn.Options{KeyLengths: []int{5}}, vkattn.ErrLengths},
		{"query length too long", q, k, v, vkattn.Options{QueryLengths: []int{4, 1}}, vkattn.ErrLengths},
		{"NaN scale", q, k, v, vkattn.Options{Scale: vkattn.CustomScale(math.NaN())}, vkattn.ErrScale},
		{"infinite scale", q, k, v, vkattn.Options{Scale: vkattn.CustomScale(math.Inf(1))}, vkattn.ErrScale},
		{"NaN in Q", nan, k, v, vkattn.Options{}, vkattn.ErrNonFinite},
		{"Inf in K", q, inf, v, vkattn.Options{}, vkattn.ErrNonFinite},
		{"closed tensor", closed, k, v, vkattn.Options{}, vkattn.ErrClosed},
		{"head width beyond the kernel", huge, huge, huge, vkattn.Options{}, vkattn.ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := devtest.Dev.Attention(c.q, c.k, c.v, c.opts)
			if !errors.Is(err, c.want) {
				out.Close()
				t.Fatalf("got error %v, want %v", err, c.want)
			}
		})
	}

	// Shape errors at upload time.
	if _, err := devtest.Dev.Upload([]int{3, 0, 2}, nil); !errors.Is(err, vkattn.ErrEmpty) {
		t.Errorf("zero-sized axis: got %v, want ErrEmpty", err)
	}
	if _, err := devtest.Dev.Upload([]int{5}, make([]float32, 5)); !errors.Is(err, vkattn.ErrShape) {
		t.Errorf("rank 1: got %v, want ErrShape", err)
	}
	if _, err := devtest.Dev.Upload([]int{2, 3}, make([]float32, 5)); !errors.Is(err, vkattn.ErrShape) {
		t.Errorf("value count: got %v, want ErrShape", err)
	}
	// A tensor of another device.
	other, err := devtest.StorageDev.Upload([]int{2, 4, 3, 8}, make([]float32, 2*4*3*8))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := devtest.Dev.Attention(other, k, v, vkattn.Options{}); !errors.Is(err, vkattn.ErrDevice) {
		t.Errorf("tensor of another device: got %v, want ErrDevice", err)
	}
	// A head one wider than the kernels take, in K or in V; the widest
	// plans.
	w := vkattn.MaxHeadWidth
	for _, c := range [][2]int{{w + 1, 8}, {8, w + 1}} {
		if _, err := devtest.Dev.Plan([]int{1, 1, 2, c[0]}, []int{1, 1, 3, c[0]}, []int{1, 1, 3, c[1]}, vkattn.Options{}); !errors.Is(err, vkattn.ErrTooLarge) {
			t.Errorf("d_k %d, d_v %d: got %v, want ErrTooLarge", c[0], c[1], err)
		}
	}
	if _, err := devtest.Dev.Plan([]int{1, 1, 2, w}, []int{1, 1, 3, w}, []int{1, 1, 3, w}, vkattn.Options{}); err != nil {
		t.Errorf("d_k = d_v = MaxHeadWidth (%d): %v", w, err)
	}
	// K of one KV head too large for one binding (4 GiB; lavapipe's vec4
	// texel views reach 2 GiB, its storage bindings 128 MiB) cannot be
	// split; weights of one head too large (256 MiB) can, into blocks of
	// query rows, and larger calls whose heads fit are split by heads.
	if _, err := devtest.Dev.Plan([]int{1, 1, 16, 8}, []int{1, 1, 1 << 27, 8}, []int{1, 1, 1 << 27, 8}, vkattn.Options{}); !errors.Is(err, vkattn.ErrTooLarge) {
		t.Errorf("huge K of one head: got %v, want ErrTooLarge", err)
	}
	if p, err := devtest.Dev.Plan([]int{1, 1, 8192, 8}, []int{1, 1, 8192, 8}, []int{1, 1, 8192, 8}, vkattn.Options{WantWeights: true}); err != nil || p.Kernel.Chunks < 2 || p.Kernel.ChunkRows >= 8192 {
		t.Errorf("256 MiB of weights for one head: plan %v, %v; want blocks of query rows", p.Kernel, err)
	}
	if p, err := devtest.Dev.Plan([]int{1, 64, 4096, 8}, []int{1, 64, 4096, 8}, []int{1, 64, 4096, 8}, vkattn.Options{WantWeights: true}); err != nil || p.Kernel.Chunks < 2 {
		t.Errorf("4 GiB of weights, 64 MiB per head: plan %v, %v; want chunks", p.Kernel, err)
	}
}

// TestFusedPathAllocatesNoScoreMatrix: without WantWeights the fused kernel
// allocates nothing of L*S elements (vk allocation accounting).
func TestFusedPathAllocatesNoScoreMatrix(t *testing.T) {
	const l, s, d = 512, 512, 16
	p := devtest.NewProblem(rand.New(rand.NewSource(1)), 1, 1, 1, l, s, d, d)
	q, _ := devtest.Dev.Upload(p.QS[:], p.Q)
	k, _ := devtest.Dev.Upload(p.KS[:], p.K)
	v, _ := devtest.Dev.Upload(p.VS[:], p.V)
	defer q.Close()
	defer k.Close()
	defer v.Close()
	devtest.Dev.ResetAllocStats()
	before := devtest.Dev.Stats()
	out, err := devtest.Dev.Attention(q, k, v, vkattn.Options{Causal: vkattn.CausalTopLeft, WantLSE: true})
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	st := devtest.Dev.Stats()
	scores := uint64(4 * l * s)
	if st.Largest >= scores {
		t.Errorf("largest allocation %d bytes >= the %d-byte score matrix", st.Largest, scores)
	}
	if grew := st.Peak - before.Live; grew >= scores {
		t.Errorf("attention needed %d bytes at peak, the score matrix alone is %d", grew, scores)
	}
	if st.Peak <= before.Live {
		t.Errorf("the accounting saw no memory in use at all (the output must live somewhere)")
	}
}
