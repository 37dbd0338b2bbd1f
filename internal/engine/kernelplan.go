package engine

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

// Plan is a call's public plan (core.Plan, what users read) with the
// planner's own plans behind it, which binding a call needs: the
// attention kernel's and, for additive attention, its projections'.
type Plan struct {
	core.Plan
	kernel pipelines.AttentionPlan
	layers []LayerPlan
	// What the call was planned from and binding reads, so that the two
	// cannot disagree: its options, key padding and KV cache.
	opts       core.Options
	keyPadding *core.KeyPadding
	cache      *CacheRefs
}

// LayerPlan is a dense layer's public plan with the planner's plan behind
// it.
type LayerPlan struct {
	core.LayerPlan
	linear pipelines.LinearPlan
}

// SetProjections makes ls the dense layers p runs first (additive
// attention's), in its public plan too.
func (p *Plan) SetProjections(ls ...LayerPlan) {
	p.layers = ls
	p.Projections = make([]core.LayerPlan, len(ls))
	for i, l := range ls {
		p.Projections[i] = l.LayerPlan
	}
}

// Projection is the i-th dense layer SetProjections gave p.
func (p *Plan) Projection(i int) LayerPlan { return p.layers[i] }

// kernelPlan describes the planner's choice p.
func kernelPlan(p pipelines.AttentionPlan) core.KernelPlan {
	return core.KernelPlan{Variant: p.Variant.Name(), LoadPath: p.Path, Why: p.Why,
		Types: [3]core.DType{p.Shape.Q.Type, p.Shape.K.Type, p.Shape.V.Type}, VFromK: p.Shape.VFromK,
		KernelLayout: p.KernelLayout, Description: p.String()}
}

// linearKernelPlan describes the planner's choice p.
func linearKernelPlan(p pipelines.LinearPlan) core.LinearKernelPlan {
	return core.LinearKernelPlan{Variant: p.Variant.Name(), LoadPath: p.Path, Why: p.Why, LinearLayout: p.LinearLayout, Description: p.String()}
}

// AttentionPlanOf is the planner's own plan behind p, for tests of what
// it chose.
func AttentionPlanOf(p Plan) pipelines.AttentionPlan { return p.kernel }
