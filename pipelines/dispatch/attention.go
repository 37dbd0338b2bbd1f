package dispatch

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// AttentionArgs are the buffers of a planned attention call; a buffer
// is nil exactly when the plan's shape lacks it (the one lowering of a
// call makes both).
type AttentionArgs struct {
	Q, K, V, O     *vk.Buffer
	Mask, BoolMask *vk.Buffer
	Lengths        *vk.Buffer // int32 key lengths [B] then query lengths [B]
	LSE            *vk.Buffer // (B, H, L) float
	Weights        *vk.Buffer // (B, H, L, S) float
	KeyPadding     *vk.Buffer // (B, S) float 0 / -inf
	WA             *vk.Buffer // additive plans: w_a, DK floats
	// Heads holds per query head the sink logit (element 2h) and the ALiBi
	// slope (2h+1), for shapes with Sinks or ALiBi.
	Heads *vk.Buffer
	// PageTable is the int32 (B, PagesPerItem) page table of paged shapes.
	PageTable *vk.Buffer
}

// byBinding lists x's buffers at their bindings, n of them.
func (x *AttentionArgs) byBinding(n int) []vk.Arg {
	bound := make([]vk.Arg, n)
	for i, b := range []*vk.Buffer{
		pipelines.BindQ: x.Q, pipelines.BindK: x.K, pipelines.BindV: x.V, pipelines.BindO: x.O,
		pipelines.BindMask: x.Mask, pipelines.BindBoolMask: x.BoolMask, pipelines.BindLengths: x.Lengths,
		pipelines.BindLSE: x.LSE, pipelines.BindWeights: x.Weights, pipelines.BindKeyPadding: x.KeyPadding,
		pipelines.BindHeads: x.Heads, pipelines.BindPageTable: x.PageTable, pipelines.BindWA: x.WA,
	} {
		if i < n {
			bound[i].Buffer = b
		}
	}
	return bound
}

// checkRange is pipelines.CheckRange of a buffer; nil is absent.
func checkRange(dev core.DeviceInfo, what string, buf *vk.Buffer, texel, vec4 bool, t core.DType) error {
	if buf == nil {
		return nil
	}
	return pipelines.CheckRange(dev, what, buf.Size(), texel, vec4, t)
}

// Attention binds the buffers of a planned attention call: its
// parameters, scratch buffers and descriptor sets, and the split-K combine
// pass when the plan has one. A call larger than one binding reaches runs
// as the plan's chunks, each bound through windows of the buffers.
func (ks *Kernels) Attention(p pipelines.AttentionPlan, x AttentionArgs) (*Step, error) {
	info := ks.dev.Info.DeviceInfo
	texel := p.Path == core.TexelLoadPath
	if err := checkRange(info, "key padding", x.KeyPadding, texel, false, core.Float32); err != nil {
		return nil, err
	}
	spec := p.Kernel()
	k, err := ks.kernel(spec)
	if err != nil {
		return nil, err
	}
	st := &Step{}
	fail := func(err error) (*Step, error) {
		st.Close()
		return nil, err
	}
	var partials *vk.Buffer
	var combine *vk.Kernel
	if n := p.PartialsBytes(); n > 0 {
		if partials, err = ks.dev.NewBuffer(n); err != nil {
			return fail(err)
		}
		st.own(partials)
		if err := checkRange(info, "split-K partials", partials, false, false, core.Float32); err != nil {
			return fail(err)
		}
		if combine, err = ks.kernel(pipelines.CombineKernel()); err != nil {
			return fail(err)
		}
	}
	for _, c := range p.ChunkList() {
		if err := ks.attentionChunk(st, k, len(spec.Bindings), combine, partials, &p, &x, c); err != nil {
			return fail(err)
		}
	}
	return st, nil
}

// attentionChunk binds chunk c of the call into st.
func (ks *Kernels) attentionChunk(st *Step, k *vk.Kernel, bindings int, combine *vk.Kernel, partials *vk.Buffer, p *pipelines.AttentionPlan, x *AttentionArgs, c pipelines.Chunk) error {
	d, err := p.BindChunk(ks.dev.Info.DeviceInfo, c)
	if err != nil {
		return err
	}
	bound := x.byBinding(bindings)
	if partials != nil {
		bound[pipelines.BindWeights].Buffer = partials
	}
	for _, w := range d.Windows {
		bound[w.Binding].Offset, bound[w.Binding].Range = w.Offset, w.Size
	}
	if err := ks.bindParams(st, bound, pipelines.BindParams, d.Params); err != nil {
		return err
	}
	if err := st.add(k, bound, d.Groups, d.FLOPs); err != nil {
		return err
	}
	if combine != nil {
		params := bound[pipelines.BindParams].Buffer
		o, lse, lengths, heads := bound[pipelines.BindO], bound[pipelines.BindLSE], bound[pipelines.BindLengths], bound[pipelines.BindHeads]
		return st.add(combine, []vk.Arg{{Buffer: params}, {Buffer: partials}, o, lse, lengths, heads}, d.CombineGroups, 0)
	}
	return nil
}

// bindParams binds a buffer of the parameter block params, written by
// st's commands, at bound[at], and the dummy buffer wherever bound has
// none.
func (ks *Kernels) bindParams(st *Step, bound []vk.Arg, at int, params []byte) error {
	var err error
	if bound[at].Buffer, err = st.params(ks, params); err != nil {
		return err
	}
	return ks.orAll(bound)
}

// add adds a dispatch of k over the buffers bound, in groups workgroups
// doing flops of attention work, to st.
func (st *Step) add(k *vk.Kernel, bound []vk.Arg, groups [3]uint32, flops float64) error {
	set, err := k.Bind(bound)
	if err != nil {
		return err
	}
	st.own(set)
	st.dispatches = append(st.dispatches, dispatch{kernel: k, set: set, groups: groups, flops: flops})
	return nil
}

// orAll binds the dummy buffer wherever bound has none (an absent
// optional input or output).
func (ks *Kernels) orAll(bound []vk.Arg) error {
	for i := range bound {
		var err error
		if bound[i].Buffer, err = ks.or(bound[i].Buffer); err != nil {
			return err
		}
	}
	return nil
}

// bind binds buffers to a kernel's bindings in order; nil binds the dummy
// buffer (an absent optional input or output).
func (ks *Kernels) bind(k *vk.Kernel, bufs ...*vk.Buffer) (*vk.DescriptorSet, error) {
	args := make([]vk.Arg, len(bufs))
	for i, b := range bufs {
		args[i].Buffer = b
	}
	if err := ks.orAll(args); err != nil {
		return nil, err
	}
	return k.Bind(args)
}

// PrepareAttention binds an attention call and records it on its own.
func (ks *Kernels) PrepareAttention(p pipelines.AttentionPlan, x AttentionArgs) (*Prepared, error) {
	st, err := ks.Attention(p, x)
	if err != nil {
		return nil, err
	}
	return ks.Prepare(st)
}
