package dispatch

import (
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// BackwardArgs are the buffers of an attention call's backward pass:
// the forward's (Q, K, V, masks, lengths, per-head data, with O and LSE
// its outputs, read here), dO (dense, O's shape), and where the pass
// writes: D per row and each row's sink gradient (dense (B, H, L)
// scratch) and the gradients, dense float32 of Q's, K's and V's shapes.
type BackwardArgs struct {
	AttentionArgs
	DO, RowD, DSink, DQ, DK, DV *vk.Buffer
	// DWA, additive plans: each key row's share of dw_a, (B, S, d_a).
	DWA *vk.Buffer
}

// AttentionBackward binds the backward pass of the forward call planned
// as p (planned with its LSE; see pipelines.BackwardPlan).
func (ks *Kernels) AttentionBackward(p pipelines.AttentionPlan, x BackwardArgs) (*Step, error) {
	bp, err := pipelines.PlanBackward(ks.dev.Info.DeviceInfo, p)
	if err != nil {
		return nil, err
	}
	var passes [2]*vk.Kernel
	for i, spec := range bp.Passes {
		if passes[i], err = ks.kernel(spec); err != nil {
			return nil, err
		}
	}
	st := &Step{}
	for _, c := range bp.Chunks {
		if err := ks.backwardChunk(st, passes, &bp, &x, c); err != nil {
			st.Close()
			return nil, err
		}
	}
	return st, nil
}

// backwardChunk binds chunk c's two passes into st.
func (ks *Kernels) backwardChunk(st *Step, passes [2]*vk.Kernel, bp *pipelines.BackwardPlan, x *BackwardArgs, c pipelines.Chunk) error {
	d, err := bp.BindChunk(ks.dev.Info.DeviceInfo, c)
	if err != nil {
		return err
	}
	bound := x.byBinding(len(bp.Passes[0].Bindings))
	for i, b := range []*vk.Buffer{
		pipelines.BindDO: x.DO, pipelines.BindRowD: x.RowD, pipelines.BindDSink: x.DSink,
		pipelines.BindDQ: x.DQ, pipelines.BindDK: x.DK, pipelines.BindDV: x.DV, pipelines.BindDWA: x.DWA,
	} {
		if i >= pipelines.BindDO {
			bound[i].Buffer = b
		}
	}
	for _, w := range d.Windows {
		bound[w.Binding].Offset, bound[w.Binding].Range = w.Offset, w.Size
	}
	if err := ks.bindParams(st, bound, pipelines.BindParams, d.Params); err != nil {
		return err
	}
	for i, pass := range passes {
		if err := st.add(pass, bound, d.Groups[i], 0); err != nil {
			return err
		}
	}
	return nil
}
