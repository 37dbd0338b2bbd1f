package engine

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

// weightUpload is a layer's weight tensor and the field that keeps it.
type weightUpload struct {
	dst   **Tensor
	data  []float32
	dtype core.DType // what it is stored as (zero: float32)
}

// uploadWeights uploads every weight that is present as a flat tensor,
// with its exact largest |value| as its bound (weights are never written):
// all of them, or on an error none (what it had uploaded is freed).
func (d *Device) uploadWeights(ws []weightUpload) error {
	for i, u := range ws {
		if u.data == nil {
			continue
		}
		t, err := d.upload([]int{1, len(u.data)}, u.data, u.dtype, 0)
		if err != nil {
			for _, done := range ws[:i] {
				closeTensors(*done.dst)
				*done.dst = nil
			}
			return err
		}
		*u.dst = t
	}
	return nil
}

// planLayer plans the dense layer in says (its rows, outputs and inputs,
// X and Y dense in their tensors, W's offset in its tensor, the bias, the
// element types, Float32Products) on d's load path and tuning.
func (d *Device) planLayer(name string, in pipelines.LinearInput) (LayerPlan, error) {
	if err := d.checkOpen(); err != nil {
		return LayerPlan{}, err
	}
	tuning := d.Tuning() // a copy: SetTuning may run meanwhile
	in.Aligned = in.Inputs%4 == 0 && in.WOffset%4 == 0
	in.Force, in.Tuning = d.path, &tuning
	kp, err := pipelines.PlanLinear(d.dev.Info.DeviceInfo, in)
	return LayerPlan{Name: name, Rows: in.Rows, Outputs: in.Outputs, Inputs: in.Inputs, Kernel: linearKernelPlan(kp)}, deviceError(err)
}
