package pipelines

import (
	"testing"

	"github.com/vkattn/vkattn/vk"
)

// lavapipeLike is a device description with lavapipe's driver ID and the
// properties the planner reads; no Vulkan device is needed to plan.
func lavapipeLike() vk.PhysicalDevice {
	return vk.PhysicalDevice{
		Name: "fake lavapipe", Type: vk.DeviceCPU, DriverID: vk.DriverIDLavapipe,
		TexelR32F: true, TexelRGBA32F: true,
		Limits: vk.Limits{
			MaxWorkGroupCount: [3]uint32{65535, 65535, 65535}, MaxWorkGroupSize: [3]uint32{1024, 1024, 64},
			MaxWorkGroupInvocations: 1024, SubgroupSize: 8, SubgroupShuffle: true,
		},
	}
}

// TestPlanUsesTheTuning checks that a plan carries the tuning's keys per
// step and shared loads where they apply, and one key per step and
// unshared loads where they do not (a regression: the keys-per-step rule
// once read the vec4 decision before it was made, so every plan ran one
// key per step).
func TestPlanUsesTheTuning(t *testing.T) {
	dev := lavapipeLike()
	tuning := DefaultTuning(dev)
	prefill := PlanInput{B: 1, H: 8, HKV: 8, L: 1024, S: 1024, DK: 64, DV: 64, Aligned: true}
	cases := []struct {
		name       string
		edit       func(*PlanInput)
		keys       int
		shared     int
		variant    string
		splitKeyed bool
	}{
		{"prefill vec4", func(*PlanInput) {}, tuning.Texel.Keys, 8, "attention_texel_vec4_shared", false},
		{"unaligned (scalar loads)", func(in *PlanInput) { in.DK, in.DV = 63, 63; in.Aligned = false }, 1, 0, "attention_texel_scalar", false},
		{"additive", func(in *PlanInput) { in.Additive = true }, 1, 0, "additive_texel_vec4", false},
		{"decode (split-K: lanes read different keys)", func(in *PlanInput) { in.L, in.S, in.H, in.HKV = 1, 4096, 32, 8 }, tuning.Texel.Keys, 0, "attention_texel_vec4_split", true},
		{"storage path", func(in *PlanInput) { in.Force = StoragePath }, tuning.Storage.Keys, 0, "attention_storage_vec4", false},
	}
	for _, c := range cases {
		in := prefill
		c.edit(&in)
		p, err := PlanAttention(dev, in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.KeyTile != c.keys || p.SharedLoads != c.shared || p.Variant.Name() != c.variant || (p.Splits > 0) != c.splitKeyed {
			t.Errorf("%s: variant %s, %d keys per step, shared loads %d, %d splits; want %s, %d, %d, split %v",
				c.name, p.Variant, p.KeyTile, p.SharedLoads, p.Splits, c.variant, c.keys, c.shared, c.splitKeyed)
		}
	}

	// Shared loads need subgroup shuffles and subgroups that tile the
	// workgroup.
	for _, edit := range []func(*vk.PhysicalDevice){
		func(d *vk.PhysicalDevice) { d.Limits.SubgroupShuffle = false },
		func(d *vk.PhysicalDevice) { d.Limits.SubgroupSize = 16 }, // workgroup 8
	} {
		d := lavapipeLike()
		edit(&d)
		p, err := PlanAttention(d, prefill)
		if err != nil {
			t.Fatal(err)
		}
		if p.SharedLoads != 0 || p.Variant.Name() != "attention_texel_vec4" {
			t.Errorf("subgroup %d, shuffles %v: variant %s with shared loads %d, want attention_texel_vec4 unshared",
				d.Limits.SubgroupSize, d.Limits.SubgroupShuffle, p.Variant, p.SharedLoads)
		}
	}
}

// TestPlanChunksSetsMasked checks that the mask loads are compiled in
// exactly when the call has an additive, boolean or key-padding mask.
func TestPlanChunksSetsMasked(t *testing.T) {
	dev := lavapipeLike()
	dev.Limits.MaxStorageBufferRange = 1 << 30
	dev.Limits.MaxTexelBufferElements = 1 << 27
	dev.Limits.MinStorageAlignment, dev.Limits.MinTexelAlignment = 16, 16
	p, err := PlanAttention(dev, PlanInput{B: 1, H: 2, HKV: 2, L: 8, S: 8, DK: 16, DV: 16, Aligned: true})
	if err != nil {
		t.Fatal(err)
	}
	dense := View{Strides: [3]int{2 * 8 * 16, 8 * 16, 16}}
	var buf vk.Buffer
	for _, c := range []struct {
		name string
		edit func(*AttentionArgs)
		want bool
	}{
		{"no mask", func(*AttentionArgs) {}, false},
		{"causal only", func(x *AttentionArgs) { x.Causal = CausalBottomRight }, false},
		{"lengths only", func(x *AttentionArgs) { x.Lengths = &buf }, false},
		{"additive mask", func(x *AttentionArgs) { x.Mask = &MaskView{} }, true},
		{"boolean mask", func(x *AttentionArgs) { x.BoolMask = &MaskView{} }, true},
		{"key padding", func(x *AttentionArgs) { x.KeyPadding = &buf }, true},
	} {
		x := AttentionArgs{B: 1, H: 2, HKV: 2, L: 8, S: 8, DK: 16, DV: 16, Q: dense, K: dense, V: dense, O: dense}
		c.edit(&x)
		q := p
		if err := PlanChunks(dev, &q, &x); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if q.Masked != c.want {
			t.Errorf("%s: Masked = %v, want %v", c.name, q.Masked, c.want)
		}
	}
}
