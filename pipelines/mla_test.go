package pipelines

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// mlaShape is multi-head latent attention (DeepSeek V2/V3): b items of
// 128 query heads over one latent KV head of d_k 576 (512 latent and 64
// rotary columns), V the latent's 512 leading columns: K's layout, read
// from K's buffer.
func mlaShape(b, l, s int) AttentionShape {
	sh := DenseShape(b, 128, 1, l, s, 576, 512)
	sh.V, sh.VFromK = sh.K, true
	return sh
}

// deviceNamed is the entry of realDevices whose name starts with prefix.
func deviceNamed(t *testing.T, prefix string) core.DeviceInfo {
	t.Helper()
	for _, d := range realDevices() {
		if strings.HasPrefix(d.Name, prefix) {
			return d
		}
	}
	t.Fatalf("no device %q in the table", prefix)
	return core.DeviceInfo{}
}

// MLA decode and prefill plan the tiled kernels on every device of the
// table that can run them, with the device's own tuning and NVIDIA's:
// d_max 576 for Q and K, 512 for V, the rows split over lanes that
// divide both in vec4s and the subgroup, a lane's and a workgroup's q and
// output within the planned registers, K tiles alone (V read from them)
// within the device's shared memory, decode split over the keys; the
// plan says the split and the shared memory. Devices that cannot run the
// tiled kernels refuse them with a LimitError naming what they lack.
func TestMLAPlansOnEveryDevice(t *testing.T) {
	nvidia, err := VendorTuning("nvidia")
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range realDevices() {
		own := DefaultTuning(dev)
		for _, tuning := range []*core.Tuning{&own, &nvidia} {
			for _, c := range []struct {
				name   string
				shape  AttentionShape
				decode bool
			}{
				{"decode", mlaShape(1, 1, 4096), true},
				{"prefill", mlaShape(1, 16, 200), false},
			} {
				name := fmt.Sprintf("%s, %s, %s", dev.Name, tuning.Source, c.name)
				p, err := PlanAttention(dev, PlanInput{AttentionShape: c.shape, Tuning: tuning})
				if why := tiledCapable(dev); why != "" {
					var limit *LimitError
					if !errors.As(err, &limit) || !strings.Contains(err.Error(), "head width 576") || !strings.Contains(err.Error(), why) {
						t.Errorf("%s: %v, %v; want a LimitError naming the head width and %q", name, p, err, why)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				lim := dev.Limits
				lanes, sg := p.LanesPerRow, p.SubgroupSize
				str := p.String()
				switch {
				case p.Variant.Family != FamilyTiled || p.Variant.SplitK != c.decode || (p.Splits > 0) != c.decode:
					t.Errorf("%s: %v; want the tiled kernels, split-K %v", name, p, c.decode)
				case p.DMax != 576 || p.DVMax != 512 || p.Path != core.StorageLoadPath || !p.Vec4:
					t.Errorf("%s: d_max %d, d_v bound %d, %v path, vec4 %v; want 576, 512, vec4 storage loads", name, p.DMax, p.DVMax, p.Path, p.Vec4)
				case 144%lanes != 0 || 128%lanes != 0 || sg%lanes != 0 || p.WorkGroup%sg != 0 || p.WorkGroup != p.TileRows/p.RowsPerLane*lanes:
					t.Errorf("%s: %d lanes a row, subgroups of %d, workgroup %d", name, lanes, sg, p.WorkGroup)
				case 4*p.RowsPerLane*(144+128)/lanes > laneFloats || p.WorkGroup*4*p.RowsPerLane*(144+128)/lanes > workgroupFloats:
					t.Errorf("%s: %d rows of %d floats a lane in %d lanes hold more than the planned registers", name, p.RowsPerLane, 4*(144+128)/lanes, p.WorkGroup)
				case p.SharedBytes != 16*(p.KeyTile*144+1) || p.SharedBytes > int(lim.MaxSharedMemory) || 16*(2*p.KeyTile*144+1) <= int(lim.MaxSharedMemory) && p.KeyTile < 32:
					t.Errorf("%s: Bc %d in %d B of shared memory (the device has %d); want the most keys whose K tile fits", name, p.KeyTile, p.SharedBytes, lim.MaxSharedMemory)
				case !strings.Contains(str, fmt.Sprintf("K tiles (V read from them: V is K's leading columns) %d B of shared memory", p.SharedBytes)):
					t.Errorf("%s: the plan does not say its shared memory: %s", name, str)
				case c.decode && (p.Splits*p.SplitKeys < 4096 || p.SplitKeys%p.KeyTile != 0 || !strings.Contains(str, fmt.Sprintf("split-K: %d splits of %d keys", p.Splits, p.SplitKeys))):
					t.Errorf("%s: %d splits of %d keys; want whole tiles covering the keys, said: %s", name, p.Splits, p.SplitKeys, str)
				}
			}
		}
	}
}

// The MLA shapes on two devices, worked out by hand from the planner's
// rules. lavapipe (subgroups of 8, 32 KiB): 8 lanes a row (36 floats of q
// and 32 of the output each: 136 a lane), 16 rows in 128 lanes (256
// lanes would hold 34,816 floats, past 32 Ki), 8-key K tiles (18,448 B;
// 16 keys would take 36,880), K and V apart 4 keys (17,408 B); decode:
// 8 row blocks, 4 * 8 compute units over 8 blocks = 4 splits of 1024
// keys. H100 (warps of 32, 48 KiB): 16 lanes a row (68 floats), 16 rows
// in 256 lanes, 16-key K tiles (36,880 B), K and V apart 8 keys (34,816
// B); decode: 8 row blocks, 4 * 132 / 8 = 66 splits wanted (the partials'
// cap, 4096 * 1088 / (128 * 514) = 67, allows them), 63 keys a split
// rounded down to whole tiles: 48, so 86 splits (56 and 74 with K and
// V's 8-key tiles).
func TestMLAPlanShapes(t *testing.T) {
	for _, c := range []struct {
		dev                               string
		shape                             AttentionShape
		lanes, br, bc, wg, splits, blocks int
	}{
		{"llvmpipe", mlaShape(1, 1, 4096), 8, 16, 8, 128, 4, 8},
		{"llvmpipe", DenseShape(1, 128, 1, 1, 4096, 576, 512), 8, 16, 4, 128, 4, 8},
		{"llvmpipe", mlaShape(1, 16, 200), 8, 16, 8, 128, 0, 0},
		{"NVIDIA H100", mlaShape(1, 1, 4096), 16, 16, 16, 256, 86, 8},
		{"NVIDIA H100", DenseShape(1, 128, 1, 1, 4096, 576, 512), 16, 16, 8, 256, 74, 8},
	} {
		dev := deviceNamed(t, c.dev)
		p, err := PlanAttention(dev, PlanInput{AttentionShape: c.shape})
		if err != nil {
			t.Fatalf("%s: %v", c.dev, err)
		}
		if p.LanesPerRow != c.lanes || p.TileRows != c.br || p.KeyTile != c.bc || p.WorkGroup != c.wg || p.Splits != c.splits || p.RowBlocks != c.blocks {
			t.Errorf("%s, V from K %v: %v; want %d lanes a row, Br %d, Bc %d, workgroup %d, %d splits in %d row blocks",
				c.dev, c.shape.VFromK, p, c.lanes, c.br, c.bc, c.wg, c.splits, c.blocks)
		}
	}
}

// Heads up to core.MaxHeadWidth plan, wider ones and the combinations
// the wide kernels do not take are refused: naming the limit where it is
// one, as a plain error where the call contradicts itself.
func TestWideHeadLimits(t *testing.T) {
	dev := lavapipeLike()
	limit := func(name string, in PlanInput, want string) {
		t.Helper()
		var l *LimitError
		if _, err := PlanAttention(dev, in); !errors.As(err, &l) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want a LimitError naming %q", name, err, want)
		}
	}
	limit("d_k 577", PlanInput{AttentionShape: DenseShape(1, 2, 1, 4, 8, 577, 512)}, "head width 577")
	limit("d_v 577", PlanInput{AttentionShape: DenseShape(1, 2, 1, 4, 8, 64, 577)}, "widths 1..576")
	limit("additive d_a 257", PlanInput{AttentionShape: DenseShape(1, 1, 1, 4, 8, 257, 64), Additive: true}, "additive attention supports widths 1..256")
	limit("texel path forced", PlanInput{AttentionShape: mlaShape(1, 1, 8), Force: core.TexelLoadPath}, "not the forced texel load path")
	small := dev
	small.Limits.MaxSharedMemory = 8 << 10 // 4 keys of K alone take 9,232 B
	if _, err := PlanAttention(small, PlanInput{AttentionShape: mlaShape(1, 1, 8)}); err == nil || !strings.Contains(err.Error(), "8192 B of shared memory") {
		t.Errorf("MLA in 8 KiB of shared memory: %v; want a refusal naming it", err)
	}
	narrow := dev
	narrow.Limits.SubgroupSize, narrow.Limits.MinSubgroupSize, narrow.Limits.MaxSubgroupSize = 4, 4, 4
	if _, err := PlanAttention(narrow, PlanInput{AttentionShape: mlaShape(1, 1, 8)}); err == nil || !strings.Contains(err.Error(), "registers") {
		t.Errorf("MLA in subgroups of 4 (272 floats a lane): %v; want a refusal naming the registers", err)
	}
	// V from K: V's layout must be K's, d_v at most d_k.
	bad := mlaShape(1, 1, 8)
	bad.V.Offset = 4
	wider := DenseShape(1, 2, 1, 1, 8, 64, 128)
	wider.VFromK = true
	for _, s := range []AttentionShape{bad, wider} {
		if _, err := PlanAttention(dev, PlanInput{AttentionShape: s}); err == nil || errors.As(err, new(*LimitError)) || !strings.Contains(err.Error(), "V's layout to be K's") {
			t.Errorf("V from K with V %+v, d_v %d, K %+v, d_k %d: %v; want the call refused", s.V, s.DV, s.K, s.DK, err)
		}
	}
	// The widest heads plan, d_v 576 in its own bound; the backward stops
	// at 256.
	p, err := PlanAttention(dev, PlanInput{AttentionShape: DenseShape(1, 2, 1, 4, 8, 576, 576)})
	if err != nil || p.DMax != 576 || p.DVMax != 576 || p.Variant.Family != FamilyTiled {
		t.Errorf("d_k = d_v = 576: %v, %v; want the tiled kernels at d_max 576", p, err)
	}
	var l *LimitError
	if _, err := planBackward(dev, p); !errors.As(err, &l) || !strings.Contains(err.Error(), "head widths up to 256") {
		t.Errorf("backward of d_k = d_v = 576: %v; want a LimitError naming 256", err)
	}
	// A d_v bucket of its own: d_k 300 holds d_max 512, d_v 64 its 64.
	if p, err := PlanAttention(dev, PlanInput{AttentionShape: DenseShape(1, 2, 1, 4, 8, 300, 64)}); err != nil || p.DMax != 512 || p.DVMax != 64 || p.LanesPerRow != 8 {
		t.Errorf("d_k 300, d_v 64: %v, %v; want d_max 512, d_v bound 64", p, err)
	}
	// Float16 MLA prefill on a device with float16 matrices: the matrix
	// kernel's tiles stop at 256, so the tiled kernels run and say why.
	half := mlaShape(1, 64, 64)
	half.Q.Type, half.K.Type, half.V.Type = core.Float16, core.Float16, core.Float16
	if p, err := PlanAttention(withMatrices(deviceNamed(t, "NVIDIA H100"), 16), PlanInput{AttentionShape: half}); err != nil ||
		p.Variant.Family != FamilyTiled || !strings.Contains(p.Why, "cooperative matrices not used") {
		t.Errorf("float16 MLA prefill on matrices: %v, %v; want the tiled kernels and why not the matrices", p, err)
	}
}

// A tuning without a Wide shape (saved before it existed, or a GPU's
// without tiled kernels) plans wide heads with its device's default:
// the same plan as the quirk table's.
func TestWideHeadsWithoutAWideTuning(t *testing.T) {
	dev := lavapipeLike()
	in := PlanInput{AttentionShape: mlaShape(1, 1, 4096)}
	want, err := PlanAttention(dev, in)
	if err != nil {
		t.Fatal(err)
	}
	saved := DefaultTuning(dev)
	saved.Wide = nil
	in.Tuning = &saved
	got, err := PlanAttention(dev, in)
	if err != nil || got.String() != want.String() {
		t.Errorf("a tuning without Wide: %v, %v; want %v", got, err, want)
	}
}
