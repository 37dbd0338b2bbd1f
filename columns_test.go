package vkattn_test

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/reference"
)

// columnsOf is columns [first, first+n) of each row of x, rows w wide.
func columnsOf(x []float32, w, first, n int) []float32 {
	var out []float32
	for i := 0; i < len(x); i += w {
		out = append(out, x[i+first:i+first+n]...)
	}
	return out
}

// Tensor.Columns is a view of the same buffer: it downloads and reads
// element by element as the columns it names, and as V it gives the
// attention of V holding those columns (the float64 reference on a copy)
// on lavapipe's own plan and NVIDIA's; the leading columns are read from
// K's rows (the plan says so), other columns as a strided V of their own.
func TestTensorColumns(t *testing.T) {
	devtest.InParallel(t, devtest.OwnAndNVIDIA, func(t *testing.T, plan string) {
		d := devtest.EveryPlan()[plan]
		const H, HKV, L, S, DK, DV = 2, 1, 3, 20, 16, 8
		r := rand.New(rand.NewSource(16))
		qd, kd := devtest.RandomValues(r, H*L*DK), devtest.RandomValues(r, HKV*S*DK)
		q := devtest.Upload(t, d, []int{1, H, L, DK}, qd)
		k := devtest.Upload(t, d, []int{1, HKV, S, DK}, kd)
		opts := vkattn.Options{Causal: vkattn.CausalBottomRight, Scale: vkattn.CustomScale(0.3), WantLSE: true}
		for _, first := range []int{0, 4} {
			v, err := k.Columns(first, DV)
			if err != nil {
				t.Fatal(err)
			}
			vd := columnsOf(kd, DK, first, DV)
			if got := devtest.Download(t, v); !slices.Equal(got, vd) {
				t.Fatalf("Columns(%d, %d) downloads %v, want %v", first, DV, got, vd)
			}
			if x, err := v.At(0, 0, 5, 3); err != nil || x != kd[5*DK+first+3] {
				t.Errorf("Columns(%d, %d).At(0, 0, 5, 3) = %v, %v; want %v", first, DV, x, err, kd[5*DK+first+3])
			}
			out, err := d.Attention(q, k, v, opts)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := reference.Attention(qd, [4]int{1, H, L, DK}, kd, [4]int{1, HKV, S, DK}, vd, [4]int{1, HKV, S, DV}, opts)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("V = K.Columns(%d, %d)", first, DV)
			devtest.Compare(t, what+" O", devtest.Download(t, out.O), ref.O)
			devtest.Compare(t, what+" LSE", devtest.Download(t, out.LSE), ref.LSE)
			if got := out.Plan.Kernel.VFromK; got != (first == 0) {
				t.Errorf("%s: plan's VFromK %v, want %v: %v", what, got, first == 0, out.Plan)
			}
			if explained := out.Plan.Explain(opts); (first == 0) != strings.Contains(explained, "V is K's leading 8 columns") {
				t.Errorf("%s: Explain says\n%s", what, explained)
			}
			out.Close()
		}
	})
}

// Columns refuses what no kernel reads and what is not a view: ranges
// outside the rows, q8_0 and q4_0 blocks split, a nil or closed tensor;
// a column view is not Write's dense tensor. Whole blocks of a q8_0
// tensor are read as the tensor's own values.
func TestTensorColumnsRefusals(t *testing.T) {
	d := devtest.Dev
	r := rand.New(rand.NewSource(17))
	x := devtest.RandomValues(r, 2*64)
	f := devtest.Upload(t, d, []int{1, 1, 2, 64}, x)
	q8 := devtest.MustUploadAs(t, d, []int{1, 1, 2, 64}, x, vkattn.Q8_0)
	defer q8.Close()
	q4 := devtest.MustUploadAs(t, d, []int{1, 1, 2, 64}, x, vkattn.Q4_0)
	defer q4.Close()
	closed := devtest.MustUploadAs(t, d, []int{1, 1, 2, 64}, x, vkattn.Float32)
	closed.Close()
	var none *vkattn.Tensor
	columns := func(t *vkattn.Tensor, first, n int) func() error {
		return func() error {
			_, err := t.Columns(first, n)
			return err
		}
	}
	devtest.CheckRefusals(t, []devtest.Refusal{
		{Name: "first < 0", Err: vkattn.ErrShape, Run: columns(f, -1, 8)},
		{Name: "n = 0", Err: vkattn.ErrShape, Run: columns(f, 0, 0)},
		{Name: "past the row", Err: vkattn.ErrShape, Run: columns(f, 60, 8)},
		{Name: "wider than the row", Err: vkattn.ErrShape, Run: columns(f, 0, 65)},
		{Name: "q8_0 block split by n", Err: vkattn.ErrShape, Run: columns(q8, 0, 16)},
		{Name: "q8_0 block split by first", Err: vkattn.ErrShape, Run: columns(q8, 16, 32)},
		{Name: "q4_0 block split", Err: vkattn.ErrShape, Run: columns(q4, 8, 32)},
		{Name: "nil tensor", Err: vkattn.ErrShape, Run: columns(none, 0, 8)},
		{Name: "closed tensor", Err: vkattn.ErrClosed, Run: columns(closed, 0, 8)},
		{Name: "Write to a column view", Err: vkattn.ErrShape, Run: func() error {
			v, err := f.Columns(0, 64)
			if err != nil {
				return err
			}
			return v.Write(x)
		}},
	})
	if _, err := f.Columns(0, 65); err == nil || !strings.Contains(err.Error(), "64") {
		t.Errorf("Columns(0, 65) of rows 64 wide: %v, want the refusal naming the width", err)
	}
	// A view of whole blocks holds the blocks as the tensor stores them.
	v, err := q8.Columns(32, 32)
	if err != nil {
		t.Fatal(err)
	}
	all := devtest.Download(t, q8)
	if got, want := devtest.Download(t, v), columnsOf(all, 64, 32, 32); !slices.Equal(got, want) {
		t.Errorf("q8_0 Columns(32, 32) downloads %v, want %v", got, want)
	}
}
