package pipelines

import (
	"github.com/vkattn/vkattn/vk"
)

// BackwardArgs are the buffers of an attention call's backward pass: the
// forward's (Q, K, V, masks, lengths, per-head data and scalars, with O
// and LSE its outputs, read here), dO (dense, O's shape), and where the
// pass writes: D per row and each row's sink gradient (dense (B, H, L)
// scratch) and the gradients, dense float32 of Q's, K's and V's shapes.
type BackwardArgs struct {
	AttentionArgs
	DO, RowD, DSink, DQ, DK, DV *vk.Buffer
	// DWA, additive plans: each key row's share of dw_a, (B, S, d_a).
	DWA *vk.Buffer
}

// backwardWorkGroup is the backward kernels' workgroup size.
const backwardWorkGroup = 64

// backwardBindingTypes are attention_backward.comp's bindings: the
// forward's, storage buffers but the Params block, then the pass's own.
func backwardBindingTypes() []vk.BindingType {
	b := make([]vk.BindingType, backwardBindings)
	for i := range b {
		b[i] = vk.StorageBuffer
	}
	b[bindParams] = vk.UniformBuffer
	return b
}

// backwardPlan is how the backward of a forward plan runs: its query and
// key passes' families and, for the tiled passes, the bound of d_k and
// d_v their registers hold and the rows a tile stages.
type backwardPlan struct {
	families   [2]Family
	dMax, tile int
}

// maxTiledBackwardD bounds the head widths the tiled passes hold in
// registers (four rows of d_max floats per invocation).
const maxTiledBackwardD = 256

// planBackward gives the tiled passes to the plans of the tiled forward
// (the GPU plans) whose scores are dot products and whose head widths and
// tiles fit; the row passes to every other.
func planBackward(dev vk.PhysicalDevice, p AttentionPlan) backwardPlan {
	if p.Additive {
		return backwardPlan{families: [2]Family{FamilyAdditiveBackwardQ, FamilyAdditiveBackwardKV}}
	}
	rows := backwardPlan{families: [2]Family{FamilyBackwardQ, FamilyBackwardKV}}
	s := &p.Shape
	dMax := 16
	for dMax < max(s.DK, s.DV) {
		dMax *= 2
	}
	// Two tiles of d_max floats per staged row, and its LSE and D.
	tile := min(16, int(dev.Limits.MaxSharedMemory)/(4*(2*dMax+2)))
	if p.Variant.Family != FamilyTiled || dMax > maxTiledBackwardD || tile < 4 ||
		backwardWorkGroup > min(int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations)) {
		return rows
	}
	return backwardPlan{families: [2]Family{FamilyTiledBackwardQ, FamilyTiledBackwardKV}, dMax: dMax, tile: tile}
}

// AttentionBackward binds the backward pass of the forward call planned
// as p (planned with its LSE): a query pass (dQ, D, the sinks' shares),
// then a key pass (dK, dV), each an output row per invocation with no
// atomics; on the GPU plans the tiled passes stage the other side's rows
// in shared memory. The call must fit one binding per buffer (no chunks)
// and read K and V unpaged. An additive plan's Q and K are the
// projections (d_k = d_a), and the key pass writes each key row's share
// of dw_a too.
func (ks *Kernels) AttentionBackward(p AttentionPlan, x BackwardArgs) (*Step, error) {
	dev := ks.dev.Info
	s := &p.Shape
	switch {
	case p.Chunks > 1:
		return nil, limitf("the backward pass of a call larger than one binding is not split into chunks")
	case s.Paging > 0:
		return nil, limitf("the backward pass reads dense K and V, not pages")
	case !s.LSE:
		return nil, limitf("the backward pass needs the forward's log-sum-exp")
	case s.kvQ8():
		return nil, limitf("the backward pass reads float K and V, not q8_0")
	}
	for _, b := range []struct {
		what string
		buf  *vk.Buffer
		t    DType
	}{{"Q", x.Q, s.Q.Type}, {"K", x.K, s.K.Type}, {"V", x.V, s.V.Type}, {"O", x.O, Float32}, {"LSE", x.LSE, Float32},
		{"dO", x.DO, Float32}, {"dQ", x.DQ, Float32}, {"dK", x.DK, Float32}, {"dV", x.DV, Float32}} {
		if err := checkRange(dev, b.what, b.buf, false, false, b.t); err != nil {
			return nil, err
		}
	}
	params := newAttentionParams(p, s, &x.AttentionArgs, chunkParams{batch: s.B, rows: s.L})
	st := &Step{}
	fail := func(err error) (*Step, error) {
		st.Close()
		return nil, err
	}
	pbuf, err := st.params(ks, params.encode())
	if err != nil {
		return fail(err)
	}
	bufs := make([]*vk.Buffer, backwardBindings)
	bufs[bindParams], bufs[bindQ], bufs[bindK], bufs[bindV] = pbuf, x.Q, x.K, x.V
	bufs[bindMask], bufs[bindBoolMask], bufs[bindLengths], bufs[bindO], bufs[bindLSE] = x.Mask, x.BoolMask, x.Lengths, x.O, x.LSE
	bufs[bindKeyPadding], bufs[bindHeads] = x.KeyPadding, x.Heads
	bufs[bindDO], bufs[bindRowD], bufs[bindDQ], bufs[bindDK], bufs[bindDV], bufs[bindDSink] = x.DO, x.RowD, x.DQ, x.DK, x.DV, x.DSink
	bufs[bindWA], bufs[bindDWA] = x.WA, x.DWA
	bp := planBackward(dev, p)
	families := bp.families
	spec := make([]int32, bwdSpecCount, tiledBwdSpecCount)
	spec[specLocalSize], spec[bwdSpecMasked], spec[bwdSpecVariants] = backwardWorkGroup, boolSpec(p.Masked), s.variants()
	spec[bwdSpecQType], spec[bwdSpecKType], spec[bwdSpecVType] = typeSpec(s.Q.Type), typeSpec(s.K.Type), typeSpec(s.V.Type)
	if bp.dMax > 0 {
		spec = append(spec, int32(bp.dMax), int32(bp.tile)) // bwdSpecDMax, bwdSpecTile
	}
	for _, pass := range []struct {
		family     Family
		rows, head int
	}{{families[0], s.L, s.H}, {families[1], s.S, s.HKV}} {
		k, err := ks.get(Variant{Family: pass.family}, backwardBindingTypes(), spec...)
		if err != nil {
			return fail(err)
		}
		set, err := ks.bind(k, bufs...)
		if err != nil {
			return fail(err)
		}
		st.own(set)
		groups := [3]uint32{uint32(ceilDiv(pass.rows, backwardWorkGroup)), uint32(pass.head), uint32(s.B)}
		for i, g := range groups {
			if g > dev.Limits.MaxWorkGroupCount[i] {
				return fail(limitf("the backward pass needs %v workgroups, beyond the device's grid %v", groups, dev.Limits.MaxWorkGroupCount))
			}
		}
		st.dispatches = append(st.dispatches, dispatch{kernel: k, set: set, groups: groups})
	}
	return st, nil
}
