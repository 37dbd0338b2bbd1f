package engine

import (
	"fmt"

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
	return LayerPlan{Name: name, Rows: in.Rows, Outputs: in.Outputs, Inputs: in.Inputs, Kernel: linearKernelPlan(kp)}, DeviceError(err)
}

// LayerPlan is one dense layer of an MHA plan.
type LayerPlan struct {
	Name                  string // "in_proj (Q,K,V fused)", "q_proj", "out_proj", ...
	Rows, Outputs, Inputs int
	Kernel                LinearKernelPlan
}

func (l LayerPlan) String() string {
	return fmt.Sprintf("%s: (%d x %d) x (%d x %d)^T: %v", l.Name, l.Rows, l.Inputs, l.Outputs, l.Inputs, l.Kernel)
}

// FLOPs counts a multiply-add as two operations.
func (l LayerPlan) FLOPs() float64 {
	return 2 * float64(l.Rows) * float64(l.Outputs) * float64(l.Inputs)
}
