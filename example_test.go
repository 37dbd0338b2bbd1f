package vkattn_test

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/train"
)

// The worked example of SEMANTICS.md §18: one query, three keys, and the same
// with the third key masked out.
func Example() {
	dev, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	q, _ := dev.Upload([]int{1, 2}, []float32{1, 0})
	k, _ := dev.Upload([]int{3, 2}, []float32{1, 0, 0, 1, 1, 1})
	v, _ := dev.Upload([]int{3, 2}, []float32{2, 0, 0, 4, 2, 2})
	defer q.Close()
	defer k.Close()
	defer v.Close()

	out, err := dev.Attention(q, k, v, vkattn.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	o, _ := out.O.Download()
	out.Close()
	fmt.Printf("O = [%.4f %.4f]\n", o[0], o[1])

	mask := &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 1, 3}, Values: []float32{0, 0, float32(math.Inf(-1))}}
	out, err = dev.Attention(q, k, v, vkattn.Options{Mask: mask, WantWeights: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer out.Close()
	o, _ = out.O.Download()
	a, _ := out.Weights.Download()
	fmt.Printf("masked: A = [%.4f %.4f %.4f], O = [%.4f %.4f]\n", a[0], a[1], a[2], o[0], o[1])
	// Output:
	// O = [1.6044 1.5933]
	// masked: A = [0.6698 0.3302 0.0000], O = [1.3395 1.3210]
}

// The gradients of sum(O * dO) on the device for the worked example's query
// and its first two keys, whose weights P are the masked example's above:
// with dO = [1, 0], dV_j = P_j dO, and dQ = scale sum_j P_j (dO.v_j - D) k_j
// with D = sum_j P_j dO.v_j.
func ExampleDevice_AttentionBackward() {
	dev, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	k, _ := dev.Upload([]int{2, 2}, []float32{1, 0, 0, 1})
	v, _ := dev.Upload([]int{2, 2}, []float32{2, 0, 0, 4})
	q, _ := dev.Upload([]int{1, 2}, []float32{1, 0})
	dO, _ := dev.Upload([]int{1, 2}, []float32{1, 0})
	defer q.Close()
	defer k.Close()
	defer v.Close()
	defer dO.Close()
	g, err := dev.AttentionBackward(q, k, v, dO, vkattn.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	dv, _ := g.DV.Download()
	dq, _ := g.DQ.Download()
	fmt.Printf("dV = [%.4f %.4f; %.4f %.4f]\n", dv[0], dv[1], dv[2], dv[3])
	fmt.Printf("dQ = [%.4f %.4f]\n", dq[0], dq[1])
	// Output:
	// dV = [0.6698 0.0000; 0.3302 0.0000]
	// dQ = [0.3128 -0.3128]
}

// Training on the device: internal/train.Reverse learns, with
// AttentionBackward and Adam, a query vector per output position and a
// key vector per input position such that position t attends to position
// 7 - t, reversing sequences of 8 random tokens (vkattn demo prints its
// progress).
func ExampleDevice_AttentionBackward_training() {
	dev, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	res, err := train.Reverse(dev, train.DefaultConfig, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("loss below 0.001:", res.Loss < 0.001)
	fmt.Println("alignment:", res.Alignment)
	// Output:
	// loss below 0.001: true
	// alignment: [7 6 5 4 3 2 1 0]
}

// Cascade inference: a prefix shared by two sequences is attended once,
// by both sequences' last query rows together; each sequence's own suffix
// by its own row (a mask keeps each row to its sequence's keys); the two
// parts merged are each sequence's attention over its prefix and suffix
// (SEMANTICS.md §7.1), as the last line checks for sequence 1.
func ExampleDevice_Merge() {
	dev, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	up := func(shape []int, x ...float32) *vkattn.Tensor {
		t, _ := dev.Upload(shape, x)
		return t
	}
	q := up([]int{2, 2}, 1, 0, 0, 1) // row 0: sequence 0's query, row 1: sequence 1's
	prefixK, prefixV := up([]int{3, 2}, 1, 0, 0, 1, 1, 1), up([]int{3, 2}, 2, 0, 0, 4, 2, 2)
	// The suffixes side by side: key 0 is sequence 0's, keys 1 and 2 sequence 1's.
	suffixK, suffixV := up([]int{3, 2}, 0, 2, 1, -1, 3, 0), up([]int{3, 2}, 1, 1, -2, 0, 0, 8)
	own := vkattn.BoolMask{Shape: vkattn.MaskShape{1, 1, 2, 3}, Values: []bool{true, false, false, false, true, true}, Meaning: vkattn.TrueAllows}

	prefix, _ := dev.Attention(q, prefixK, prefixV, vkattn.Options{WantLSE: true})
	suffix, _ := dev.Attention(q, suffixK, suffixV, vkattn.Options{WantLSE: true, BoolMasks: []vkattn.BoolMask{own}})
	out, err := dev.Merge([]vkattn.Part{prefix.Part(), suffix.Part()})
	if err != nil {
		fmt.Println(err)
		return
	}
	o, _ := out.O.Download()
	fmt.Printf("sequence 0: O = [%.4f %.4f]\nsequence 1: O = [%.4f %.4f]\n", o[0], o[1], o[2], o[3])

	// Sequence 1 alone, over its prefix and suffix: the same row.
	full, _ := dev.Attention(up([]int{1, 2}, 0, 1), up([]int{5, 2}, 1, 0, 0, 1, 1, 1, 1, -1, 3, 0), up([]int{5, 2}, 2, 0, 0, 4, 2, 2, -2, 0, 0, 8), vkattn.Options{})
	f, _ := full.O.Download()
	fmt.Printf("sequence 1 in full: O = [%.4f %.4f]\n", f[0], f[1])
	// Output:
	// sequence 0: O = [1.5046 1.4954]
	// sequence 1: O = [0.7741 3.0795]
	// sequence 1 in full: O = [0.7741 3.0795]
}
