package nn

import (
	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/engine"
)

// weightUpload is a layer's weight tensor and the field that keeps it.
type weightUpload struct {
	dst   **engine.Tensor
	data  []float32
	dtype vkattn.DType // what it is stored as (zero: float32)
}

// uploadWeights uploads to d every weight that is present as a flat
// tensor, with its exact largest |value| as its bound (weights are never
// written): all of them, or on an error none (what it had uploaded is
// freed).
func uploadWeights(d *engine.Device, ws []weightUpload) error {
	for i, u := range ws {
		if u.data == nil {
			continue
		}
		t, err := engine.UploadBounded(d, []int{1, len(u.data)}, u.data, u.dtype, 0)
		if err != nil {
			for _, done := range ws[:i] {
				engine.CloseTensors(*done.dst)
				*done.dst = nil
			}
			return err
		}
		*u.dst = t
	}
	return nil
}
