package dispatch

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// LinearBuffers are the buffers of a dense layer Y = X W^T + b: X, W, Y,
// and the bias (nil: none).
type LinearBuffers struct{ X, W, Y, Bias *vk.Buffer }

// Linear binds the dense layer x with the buffers bufs as p planned it: a
// layer whose X, W or Y is larger than one binding reaches runs as p's
// blocks of rows and outputs, each bound through buffer windows, in the
// same step.
func (ks *Kernels) Linear(p pipelines.LinearPlan, x pipelines.LinearShape, bufs LinearBuffers) (*Step, error) {
	spec := p.Kernel()
	k, err := ks.kernel(spec)
	if err != nil {
		return nil, err
	}
	return stepOf(func(st *Step) error {
		return p.EachBlock(ks.dev.Info.DeviceInfo, &x, func(b pipelines.LinearBlock) error {
			bound := windowArgs(len(spec.Bindings), b.Windows[:], bufs.X, bufs.W, bufs.Y, bufs.Bias)
			if err := ks.bindParams(st, bound, pipelines.LinearBindParams, b.Params); err != nil {
				return err
			}
			return st.add(k, bound, b.Groups, 0)
		})
	})
}

// HeadMean binds the mean over heads of attention weights (B, H, n) into
// (B, n).
func (ks *Kernels) HeadMean(weights, mean *vk.Buffer, b, h, n int) (*Step, error) {
	info := ks.dev.Info.DeviceInfo
	if err := checkRange(info, "weights", weights, false, false, core.Float32); err != nil {
		return nil, err
	}
	groups := (b*n + 63) / 64
	if groups > int(info.Limits.MaxWorkGroupCount[0]) {
		return nil, pipelines.Limitf("%d averaged weights need %d workgroups, the device allows %d", b*n, groups, info.Limits.MaxWorkGroupCount[0])
	}
	k, err := ks.kernel(pipelines.HeadMeanKernel())
	if err != nil {
		return nil, err
	}
	set, err := ks.bind(k, weights, mean)
	if err != nil {
		return nil, err
	}
	st := &Step{owned: []closer{set}}
	st.dispatches = []dispatch{{kernel: k, set: set, groups: [3]uint32{uint32(groups), 1, 1}, push: pipelines.HeadMeanPush{B: int32(b), H: int32(h), LS: int32(n)}.Bytes()}}
	return st, nil
}
