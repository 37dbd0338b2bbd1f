package nn_test

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/nn"
)

// TestLayerWeightsAllOrNothing: a layer whose last weight cannot be stored
// (an out_proj weight beyond float16's range, uploaded after the input
// projections) is refused with ErrOverflow and leaves nothing of the
// weights uploaded before it on the device.
func TestLayerWeightsAllOrNothing(t *testing.T) {
	d, before := devtest.OpenOwnDevice(t)
	opened := vkattn.LiveObjects()
	w := devtest.RandomMHA(rand.New(rand.NewSource(16)), 8, 8, 8, true)
	w.DType = vkattn.Float16
	w.OutProjWeight[5] = 1e6
	if layer, err := nn.NewMHA(d, w); !errors.Is(err, vkattn.ErrOverflow) {
		layer.Close()
		t.Fatalf("NewMHA with an out_proj weight of 1e6 stored as float16: %v, want ErrOverflow", err)
	}
	if n := vkattn.LiveObjects(); n != opened {
		t.Errorf("%d Vulkan objects alive after the refused layer, want %d", n, opened)
	}
	devtest.CloseOwnDevice(t, d, before)
}
