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
	return stepOf(func(st *Step) error {
		return p.EachBlock(ks.dev.Info.DeviceInfo, &s, func(b pipelines.GradBlock) error {
			bound := windowArgs(len(spec.Bindings), b.Windows[:], bufs.A, bufs.B, bufs.C)
			if err := ks.bindParams(st, bound, pipelines.GradBindParams, b.Params); err != nil {
				return err
			}
			return st.add(k, bound, b.Groups, 0)
		})
	})
}

// Regroup binds the move or sum s from src into dst (regroup.comp), a
// dispatch per block in order.
func (ks *Kernels) Regroup(s pipelines.RegroupShape, src, dst *vk.Buffer) (*Step, error) {
	spec := pipelines.RegroupKernel(s.SrcType)
	k, err := ks.kernel(spec)
	if err != nil {
		return nil, err
	}
	return stepOf(func(st *Step) error {
		return pipelines.EachRegroupBlock(ks.dev.Info.DeviceInfo, &s, func(b pipelines.RegroupBlock) error {
			if err := st.add(k, windowArgs(len(spec.Bindings), b.Windows[:], src, dst), b.Groups, 0); err != nil {
				return err
			}
			st.dispatches[len(st.dispatches)-1].push = b.Push
			return nil
		})
	})
}

// windowArgs are the arguments of a dispatch of a kernel of n bindings:
// each buffer through its window (binding, offset and size); a buffer
// whose window is nil is not bound.
func windowArgs(n int, windows []*pipelines.Window, bufs ...*vk.Buffer) []vk.Arg {
	bound := make([]vk.Arg, n)
	for i, buf := range bufs {
		if w := windows[i]; w != nil {
			bound[w.Binding] = vk.Arg{Buffer: buf, Offset: w.Offset, Range: w.Size}
		}
	}
	return bound
}

// stepOf is the Step build adds its dispatches to, closed if build fails.
func stepOf(build func(st *Step) error) (*Step, error) {
	st := &Step{}
	if err := build(st); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}
