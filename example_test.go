package vkattn_test

import (
	"fmt"
	"math"

	"github.com/vkattn/vkattn"
)

// The worked example of SEMANTICS.md §14: one query, three keys, and the same
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
