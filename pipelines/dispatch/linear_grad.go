package dispatch

import (
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// GradBuffers are the buffers of a gradient product C (+)= A B^T.
type GradBuffers struct{ A, B, C *vk.Buffer }

// GradProduct binds the gradient product s with the buffers bufs as p
// planned it: one dispatch per block, the blocks of one block of C's sum
// in order (a barrier follows every dispatch).
func (ks *Kernels) GradProduct(p pipelines.GradPlan, s pipelines.GradShape, bufs GradBuffers) (*Step, error) {
	spec := p.Kernel()
	k, err := ks.kernel(spec)
	if err != nil {
		return nil, err
	}
	st := &Step{}
	err = p.EachBlock(ks.dev.Info.DeviceInfo, &s, func(b pipelines.GradBlock) error {
		bound := make([]vk.Arg, len(spec.Bindings))
		for i, buf := range []*vk.Buffer{bufs.A, bufs.B, bufs.C} {
			w := b.Windows[i]
			bound[w.Binding] = vk.Arg{Buffer: buf, Offset: w.Offset, Range: w.Size}
		}
		if err := ks.bindParams(st, bound, pipelines.GradBindParams, b.Params); err != nil {
			return err
		}
		return st.add(k, bound, b.Groups, 0)
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// Regroup binds the move or sum s from src into dst (regroup.comp), a
// dispatch per block in order.
func (ks *Kernels) Regroup(s pipelines.RegroupShape, src, dst *vk.Buffer) (*Step, error) {
	spec := pipelines.RegroupKernel(s.SrcType)
	k, err := ks.kernel(spec)
	if err != nil {
		return nil, err
	}
	st := &Step{}
	err = pipelines.EachRegroupBlock(ks.dev.Info.DeviceInfo, &s, func(b pipelines.RegroupBlock) error {
		bound := make([]vk.Arg, len(spec.Bindings))
		for i, buf := range []*vk.Buffer{src, dst} {
			w := b.Windows[i]
			bound[w.Binding] = vk.Arg{Buffer: buf, Offset: w.Offset, Range: w.Size}
		}
		if err := st.add(k, bound, b.Groups, 0); err != nil {
			return err
		}
		st.dispatches[len(st.dispatches)-1].push = b.Push
		return nil
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}
