package engine

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

// KernelPlan is the attention kernel the planner chose for a call: which
// SPIR-V variant, how it reads its inputs, and its layout (core.KernelLayout:
// bounds, rows, tiles, splits, chunks and launch grid, as the planner
// filled them). String says it in words, with why.
type KernelPlan struct {
	Variant  string        `json:"variant"`   // the SPIR-V variant, e.g. "attention_texel_vec4"
	LoadPath core.LoadPath `json:"load_path"` // how the kernel reads Q, K, V and masks
	Why      string        `json:"why"`       // why this load path and kernel
	Types    [3]core.DType `json:"types"`     // element types of Q, K and V as the kernel reads them
	// VFromK: V is K's leading columns (Tensor.Columns), read from K's
	// rows; the tiled kernels stage K's tiles alone.
	VFromK bool `json:"v_from_k,omitempty"`
	core.KernelLayout
	plan pipelines.AttentionPlan
}

// kernelPlan describes the planner's choice p.
func kernelPlan(p pipelines.AttentionPlan) KernelPlan {
	return KernelPlan{Variant: p.Variant.Name(), LoadPath: p.Path, Why: p.Why,
		Types: [3]core.DType{p.Shape.Q.Type, p.Shape.K.Type, p.Shape.V.Type}, VFromK: p.Shape.VFromK,
		KernelLayout: p.KernelLayout, plan: p}
}

func (k KernelPlan) String() string { return k.plan.String() }

// LinearKernelPlan is the dense-layer kernel (Y = X W^T + b) the planner
// chose for a layer: its variant, load path and layout (core.LinearLayout).
type LinearKernelPlan struct {
	Variant  string
	LoadPath core.LoadPath
	Why      string
	core.LinearLayout
	plan pipelines.LinearPlan
}

// linearKernelPlan describes the planner's choice p.
func linearKernelPlan(p pipelines.LinearPlan) LinearKernelPlan {
	return LinearKernelPlan{Variant: p.Variant.Name(), LoadPath: p.Path, Why: p.Why, LinearLayout: p.LinearLayout, plan: p}
}

func (k LinearKernelPlan) String() string { return k.plan.String() }

// AttentionPlanOf is the planner's own plan behind k, for tests of what
// it chose.
func AttentionPlanOf(k KernelPlan) pipelines.AttentionPlan { return k.plan }
