package vkattn

import "github.com/vkattn/vkattn/pipelines"

// weightUpload is a layer's weight tensor and the field that keeps it.
type weightUpload struct {
	dst   **Tensor
	data  []float32
	dtype DType // what it is stored as (zero: float32)
}

// uploadWeights uploads every weight that is present as a flat tensor,
// with its exact largest |value| as its bound (weights are never written).
func (d *Device) uploadWeights(ws []weightUpload) error {
	for _, u := range ws {
		if u.data == nil {
			continue
		}
		t, err := d.upload([]int{1, len(u.data)}, u.data, u.dtype, 0)
		if err != nil {
			return err
		}
		*u.dst = t
	}
	return nil
}

// planLayer plans a dense layer whose input rows are dense float32 (row
// stride = inputs) and whose weight, of element type w, starts at element
// wOffset of its tensor.
func (d *Device) planLayer(name string, rows, outputs, inputs, wOffset int, w DType) (LayerPlan, error) {
	if err := d.checkOpen(); err != nil {
		return LayerPlan{}, err
	}
	tuning := d.Tuning() // a copy: SetTuning may run meanwhile
	kp, err := pipelines.PlanLinear(d.dev.Info, pipelines.LinearInput{
		Rows: rows, Outputs: outputs, Inputs: inputs, W: w,
		Aligned: inputs%4 == 0 && wOffset%4 == 0, Force: d.path, Tuning: &tuning,
	})
	return LayerPlan{Name: name, Rows: rows, Outputs: outputs, Inputs: inputs, Kernel: linearKernelPlan(kp)}, deviceError(err)
}
