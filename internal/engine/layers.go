package engine

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

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
	return LayerPlan{LayerPlan: core.LayerPlan{Name: name, Rows: in.Rows, Outputs: in.Outputs, Inputs: in.Inputs, Kernel: linearKernelPlan(kp)}, linear: kp}, DeviceError(err)
}
