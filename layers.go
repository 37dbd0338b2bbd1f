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

// planLayer plans a dense layer whose input rows, of element type x, are
// dense (row stride = inputs) and whose weight, of element type w, starts
// at element wOffset of its tensor; f32 keeps half X and W off the
// cooperative matrices (Options.Float32Products).
func (d *Device) planLayer(name string, rows, outputs, inputs, wOffset int, x, w DType, f32 bool) (LayerPlan, error) {
	if err := d.checkOpen(); err != nil {
		return LayerPlan{}, err
	}
	tuning := d.Tuning() // a copy: SetTuning may run meanwhile
	kp, err := pipelines.PlanLinear(d.dev.Info, pipelines.LinearInput{
		Rows: rows, Outputs: outputs, Inputs: inputs, X: x, W: w,
		Aligned: inputs%4 == 0 && wOffset%4 == 0, Force: d.path, Tuning: &tuning, Float32Products: f32,
	})
	return LayerPlan{Name: name, Rows: rows, Outputs: outputs, Inputs: inputs, Kernel: linearKernelPlan(kp)}, deviceError(err)
}
