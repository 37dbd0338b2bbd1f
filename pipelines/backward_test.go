package pipelines

import (
	"errors"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// The backward of lavapipe's own plan runs on the row kernels with the
// quirk table's shape (rows per invocation by d_max, 4 rows a step,
// workgroups of 8, loads shared by the 8 lanes; Q, K, V, dO, the LSE and,
// in the key pass, D through texel views) and grids of Rows x WorkGroup
// rows a workgroup. Every plan it does not take keeps the workgroup-tiled
// passes on storage loads, and Why says why: forced storage loads, GPU
// vendors' plans, rows not read as vec4s, additive scores, a device
// whose subgroups cannot share loads, a driver with no row plan.
func TestBackwardPlansRowsOnLavapipe(t *testing.T) {
	dev := lavapipeLike()
	nvidia, err := VendorTuning("nvidia")
	if err != nil {
		t.Fatal(err)
	}
	noShuffle := lavapipeLike()
	noShuffle.Limits.SubgroupShuffle = false
	gpu := lavapipeLike()
	gpu.Name, gpu.Type, gpu.DriverID = "fake discrete GPU", core.DeviceDiscrete, core.DriverIDNvidia
	for _, c := range []struct {
		name string
		dev  core.DeviceInfo
		edit func(*PlanInput)
		rows int    // 0: the tiled passes
		why  string // in the plan's Why
	}{
		{"d 64", dev, func(*PlanInput) {}, 4, "row passes: quirk table: lavapipe"},
		{"d 128, float16", dev, func(in *PlanInput) {
			in.AttentionShape = DenseShape(1, 8, 8, 512, 512, 128, 128)
			in.Q.Type, in.K.Type, in.V.Type = core.Float16, core.Float16, core.Float16
		}, 2, "row passes"},
		{"d 16, decode", dev, func(in *PlanInput) { in.AttentionShape = DenseShape(1, 32, 8, 1, 4096, 16, 16) }, 2, "row passes"},
		{"forced storage loads", dev, func(in *PlanInput) { in.Force = core.StorageLoadPath }, 0, "the forward runs on the storage load path"},
		{"NVIDIA's plan", dev, func(in *PlanInput) { in.Tuning = &nvidia }, 0, "the forward runs on the storage load path"},
		{"odd width", dev, func(in *PlanInput) { in.AttentionShape = DenseShape(1, 8, 8, 512, 512, 63, 63) }, 0, "not read as vec4s"},
		{"additive", dev, func(in *PlanInput) { in.Additive = true }, 0, "additive scores"},
		{"no shuffles", noShuffle, func(*PlanInput) {}, 0, "no subgroup shuffles"},
		{"texel loads on a GPU", gpu, func(in *PlanInput) { in.Force = core.TexelLoadPath }, 0, "no row plan for fake discrete GPU"},
	} {
		in := PlanInput{AttentionShape: DenseShape(1, 8, 8, 512, 512, 64, 64)}
		c.edit(&in)
		in.LSE = true
		p, err := PlanAttention(c.dev, in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		bp, err := PlanBackward(c.dev, p)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !strings.Contains(bp.Why, c.why) {
			t.Errorf("%s: why %q, want it to say %q", c.name, bp.Why, c.why)
		}
		if c.rows == 0 {
			if bp.Rows != 0 || bp.Passes[0].Variant != (Variant{Family: FamilyBackwardQ}) && bp.Passes[0].Variant != (Variant{Family: FamilyAdditiveBackwardQ}) ||
				bp.Forward.Path != core.StorageLoadPath || !strings.HasPrefix(bp.Why, "workgroup-tiled passes") {
				t.Errorf("%s: %v, forward on %s; want the tiled passes on storage loads", c.name, bp, bp.Forward.Path)
			}
			continue
		}
		want := [2]string{"attention_backward_rows_q_texel_vec4_shared", "attention_backward_rows_kv_texel_vec4_shared"}
		for i, pass := range bp.Passes {
			if pass.Variant.Name() != want[i] {
				t.Errorf("%s: pass %d is %s, want %s", c.name, i, pass.Variant, want[i])
			}
			spec := func(name string) int32 { return specValue(t, pass.Spec, name) }
			if spec(localSizeTag) != 8 || spec("WG") != 8 || spec("ROWS") != int32(c.rows) || spec("STEP") != 4 || spec("SHARE") != 8 ||
				spec("D4") != int32(core.DMaxOf(in.DK)/4) || spec("Q_TYPE") != typeSpec(in.Q.Type) {
				t.Errorf("%s: pass %d's constants %v", c.name, i, pass.Spec)
			}
			b := pass.Bindings
			rowD := map[int]core.BindingType{0: core.StorageBuffer, 1: core.UniformTexelR32F}[i]
			if b[BindQ] != texelBinding(in.Q.Type, true) || b[BindDO] != core.UniformTexelRGBA32UI || b[BindLSE] != core.UniformTexelR32F || b[BindRowD] != rowD || b[BindDQ] != core.StorageBuffer {
				t.Errorf("%s: pass %d's bindings %v", c.name, i, b)
			}
		}
		if bp.Rows != c.rows || bp.WorkGroup != 8 || bp.Step != 4 || bp.Forward.Path != core.TexelLoadPath {
			t.Errorf("%s: %v; want %d rows, workgroup 8, 4 rows a step, texel loads", c.name, bp, c.rows)
		}
		d, err := bp.BindChunk(c.dev, bp.Chunks[0])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		perGroup := uint32(c.rows * 8)
		wantGroups := [2][3]uint32{{(uint32(in.L) + perGroup - 1) / perGroup, uint32(in.H), 1}, {(uint32(in.S) + perGroup - 1) / perGroup, uint32(in.HKV), 1}}
		if d.Groups != wantGroups {
			t.Errorf("%s: grids %v, want %v", c.name, d.Groups, wantGroups)
		}
	}
}

// On lavapipe before Mesa 26 the row kernels loop once per 4 keys (the
// query pass) or per 4 query rows of each head of the group (the key
// pass, in whole steps per head): 262,140 keys, or 131,068 query rows of
// each of two heads, plan; one more is a LimitError naming the budget.
func TestBackwardRowsLoopBudget(t *testing.T) {
	dev := lavapipeLike()
	for _, c := range []struct {
		name          string
		h, hkv, l, s  int
		refused       bool
		keysOrRowsMsg string
	}{
		{"keys", 1, 1, 2, 262140, false, ""},
		{"keys + 1", 1, 1, 2, 262141, true, "262141 keys"},
		{"rows of a group of 2", 2, 1, 131068, 2, false, ""},
		{"rows of a group of 2, + 1", 2, 1, 131069, 2, true, "262138 query rows a KV head"},
	} {
		in := PlanInput{AttentionShape: DenseShape(1, c.h, c.hkv, c.l, c.s, 16, 16)}
		in.LSE = true
		p, err := PlanAttention(dev, in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		bp, err := PlanBackward(dev, p)
		var limit *LimitError
		switch {
		case !c.refused && (err != nil || bp.Rows == 0):
			t.Errorf("%s: %v, %v; want the row passes", c.name, bp, err)
		case c.refused && (!errors.As(err, &limit) || !strings.Contains(err.Error(), "65535 iterations") || !strings.Contains(err.Error(), c.keysOrRowsMsg)):
			t.Errorf("%s: %v; want a LimitError naming the budget and %q", c.name, err, c.keysOrRowsMsg)
		}
	}
}
