package train

import (
	"slices"
	"testing"

	"github.com/vkattn/vkattn"
)

// Training on the device learns the reversal: the loss falls from about
// 0.1 (near-uniform weights) below 0.001 in DefaultConfig's 150 steps,
// and every position attends to its mirror.
func TestReverseLearns(t *testing.T) {
	dev, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var first float64
	res, err := Reverse(dev, DefaultConfig, func(step int, loss float64) {
		if step == 0 {
			first = loss
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !(first >= 0.08 && res.Loss <= 0.001) {
		t.Errorf("loss %.4g at the first step, %.4g after %d: want above 0.08, then below 0.001", first, res.Loss, DefaultConfig.Steps)
	}
	if want := []int{7, 6, 5, 4, 3, 2, 1, 0}; !slices.Equal(res.Alignment, want) {
		t.Errorf("alignment %v, want %v", res.Alignment, want)
	}
}
