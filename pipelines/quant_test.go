package pipelines

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// quantKV makes in's K and V dense tensors of type t, with their scales
// after the quants (as the root's tensors lay them out).
func quantKV(in *PlanInput, t core.DType) {
	in.K.Type, in.V.Type = t, t
	in.K.Scales, in.V.Scales = 0, 0
	if t.Quantized() {
		n := [2]int{in.B * in.HKV * in.S * in.DK, in.B * in.HKV * in.S * in.DV}
		in.K.Scales, in.V.Scales = n[0]/2, n[1]/2 // q8_0: a byte per quant
		if t == core.Q4_0 {
			in.K.Scales, in.V.Scales = n[0]/4, n[1]/4 // two quants a byte
		}
	}
}

// gpuLike is a discrete GPU description on which the tiled kernels plan.
func gpuLike() core.DeviceInfo {
	gpu := lavapipeLike()
	gpu.Name, gpu.Type, gpu.DriverID = "fake discrete GPU", core.DeviceDiscrete, core.DriverIDNvidia
	gpu.Limits.SubgroupSize, gpu.Limits.MinSubgroupSize, gpu.Limits.MaxSubgroupSize = 32, 32, 32
	gpu.Limits.MaxSharedMemory = 48 << 10
	return gpu
}

// TestQ4PlansAsQ8: q4_0 K and V plan exactly as q8_0 do (the same
// variant, the QUANT_LOADS build, tiles, grid, split-K and chunks) on every
// load path, lavapipe's and a GPU's, prefill, GQA, decode and paged; the
// kernels differ only in the K and V type constants, and both bind K and
// V as words through texel views. A q4_0 K binding is the whole buffer:
// 18 bytes per 32 elements, in whole 16-byte texels.
func TestQ4PlansAsQ8(t *testing.T) {
	paged := DenseShape(2, 8, 2, 1, 600, 64, 64)
	paged.Paging, paged.PagesPerItem, paged.Pages = 16, 38, 76
	paged.K.Strides = [3]int{2 * 16 * 64, 16 * 64, 64}
	paged.V.Strides = paged.K.Strides
	shapes := map[string]AttentionShape{
		"prefill": DenseShape(1, 8, 8, 256, 256, 64, 64),
		"GQA":     DenseShape(2, 8, 2, 33, 77, 32, 96),
		"decode":  DenseShape(1, 32, 8, 1, 4096, 128, 128),
		"paged":   paged,
	}
	for _, dev := range []core.DeviceInfo{lavapipeLike(), gpuLike()} {
		for name, shape := range shapes {
			for _, force := range []core.LoadPath{core.AutoLoadPath, core.TexelLoadPath, core.StorageLoadPath} {
				in := PlanInput{AttentionShape: shape, Force: force}
				pages := in.Paging > 0
				if pages {
					in.S = 600
				}
				quantKV(&in, core.Q8_0)
				if pages {
					in.K.Scales, in.V.Scales = in.Pages*in.HKV*in.Paging*in.DK/2, in.Pages*in.HKV*in.Paging*in.DV/2
				}
				p8, err := PlanAttention(dev, in)
				if err != nil {
					t.Fatalf("%s %s %v q8_0: %v", dev.Name, name, force, err)
				}
				in.K.Type, in.V.Type = core.Q4_0, core.Q4_0
				in.K.Scales, in.V.Scales = in.K.Scales/2, in.V.Scales/2
				p4, err := PlanAttention(dev, in)
				if err != nil {
					t.Fatalf("%s %s %v q4_0: %v", dev.Name, name, force, err)
				}
				what := dev.Name + " " + name + " " + force.String()
				if !p4.Variant.Quant || p4.Variant != p8.Variant || p4.Path != p8.Path || p4.Vec4 != p8.Vec4 || p4.Grid != p8.Grid ||
					p4.Splits != p8.Splits || p4.TileRows != p8.TileRows || p4.KeyTile != p8.KeyTile || p4.Chunks != p8.Chunks {
					t.Errorf("%s: q4_0 plans %s (%v, grid %v, %d splits, %d chunks), q8_0 %s (%v, grid %v, %d splits, %d chunks)",
						what, p4.Variant, p4.Path, p4.Grid, p4.Splits, p4.Chunks, p8.Variant, p8.Path, p8.Grid, p8.Splits, p8.Chunks)
					continue
				}
				k4, k8 := p4.Kernel(), p8.Kernel()
				want := slices.Clone(k8.Spec)
				for i, c := range want {
					if c.ID == uint32(specID("K_TYPE")) || c.ID == uint32(specID("V_TYPE")) {
						want[i].Value = int32(core.Q4_0)
					}
				}
				if !slices.Equal(k4.Spec, want) || !slices.Equal(k4.Bindings, k8.Bindings) {
					t.Errorf("%s: q4_0 kernel %v %v, want %v %v (q8_0's with the q4_0 type)", what, k4.Spec, k4.Bindings, want, k8.Bindings)
				}
				if p4.Path == core.TexelLoadPath && k4.Bindings[BindK] != texelBinding(core.Float32, p4.Vec4) {
					t.Errorf("%s: q4_0 K bound as %v, want words", what, k4.Bindings[BindK])
				}
				d, err := p4.BindChunk(dev, p4.ChunkList()[0])
				if err != nil {
					t.Fatal(err)
				}
				n := in.B * in.HKV * in.S * in.DK
				if pages {
					n = in.Pages * in.HKV * in.Paging * in.DK
				}
				for _, w := range d.Windows {
					if w.Binding == BindK && (w.Offset != 0 || w.Size != uint64(n/2+n/16+15)&^15) {
						t.Errorf("%s: q4_0 K of %d elements bound as [%d, +%d), want [0, +%d)", what, n, w.Offset, w.Size, (n/2+n/16+15)&^15)
					}
				}
			}
		}
	}
}

// TestQ4Refused: q4_0 rows are whole blocks of 32 (K and V each), Q is
// never q4_0, the backward pass reads float K and V; K in q4_0 and V in
// q8_0 plan together.
func TestQ4Refused(t *testing.T) {
	dev := lavapipeLike()
	for _, c := range []struct {
		name string
		edit func(*PlanInput)
		want string // "" plans
	}{
		{"d_k 48", func(in *PlanInput) { in.AttentionShape = DenseShape(1, 2, 2, 8, 8, 48, 32); quantKV(in, core.Q4_0) }, "K in q4_0 has rows of 48 elements; q4_0 rows are whole blocks of 32"},
		{"d_v 40", func(in *PlanInput) {
			in.AttentionShape = DenseShape(1, 2, 2, 8, 8, 32, 40)
			in.V.Type = core.Q4_0
		}, "V in q4_0 has rows of 40 elements"},
		{"Q in q4_0", func(in *PlanInput) { in.Q.Type = core.Q4_0 }, "Q has element type q4_0"},
		{"K q4_0, V q8_0", func(in *PlanInput) { quantKV(in, core.Q4_0); in.V.Type = core.Q8_0 }, ""},
	} {
		in := PlanInput{AttentionShape: DenseShape(1, 2, 2, 8, 8, 32, 32)}
		c.edit(&in)
		p, err := PlanAttention(dev, in)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && !p.Variant.Quant:
			t.Errorf("%s: variant %s, want a QUANT_LOADS build", c.name, p.Variant)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	in := PlanInput{AttentionShape: DenseShape(1, 2, 2, 8, 8, 32, 32)}
	in.LSE = true
	quantKV(&in, core.Q4_0)
	p, err := PlanAttention(dev, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PlanBackward(dev, p); err == nil || !strings.Contains(err.Error(), "q4_0") {
		t.Errorf("backward over q4_0 K and V: %v, want a refusal naming q4_0", err)
	}
}

// TestQuantChunkOffsets: a chunked call binds a q8_0 or q4_0 K and V
// whole (their scales follow every quant) and puts each chunk's first
// element, batch item b0 and KV head hk0, in its parameters, as for a
// float K: chunks split by batch items, by KV heads, and by query rows.
func TestQuantChunkOffsets(t *testing.T) {
	for _, c := range []struct {
		name  string
		shape AttentionShape
		reach uint32
	}{
		{"batch items", DenseShape(3, 4, 2, 64, 64, 32, 32), 64 * 32 * 4 * 4},
		{"KV heads", DenseShape(2, 4, 2, 64, 64, 32, 32), 64 * 32 * 4 * 2},
		{"query rows", DenseShape(2, 2, 2, 256, 32, 32, 32), 64 * 32 * 4},
	} {
		for _, t4 := range []core.DType{core.Float32, core.Q8_0, core.Q4_0} {
			d := lavapipeLike()
			d.Limits.MaxStorageBufferRange, d.Limits.MaxTexelBufferElements = 1<<30, 1<<28
			in := PlanInput{AttentionShape: c.shape, Force: core.StorageLoadPath}
			in.Weights = true // (B, H, L, S) weights: larger than the reach, so chunked
			quantKV(&in, t4)
			// The reach limits the weights, not K and V (a quantized K is bound whole).
			d.Limits.MaxStorageBufferRange = max(c.reach, uint32(in.B*in.HKV*in.S*in.DK*4))
			p, err := PlanAttention(d, in)
			if err != nil {
				t.Fatalf("%s %v: %v", c.name, t4, err)
			}
			if p.Chunks < 2 {
				t.Fatalf("%s %v: %d chunks, want a split", c.name, t4, p.Chunks)
			}
			for _, ch := range p.ChunkList() {
				bc, err := p.BindChunk(d, ch)
				if err != nil {
					t.Fatal(err)
				}
				var ap attentionParams
				if err := binary.Read(bytes.NewReader(bc.Params), binary.LittleEndian, &ap); err != nil {
					t.Fatal(err)
				}
				var kWin Window
				for _, w := range bc.Windows {
					if w.Binding == BindK {
						kWin = w
					}
				}
				// The chunk's first key element, counted from its window's
				// start (a float K's window starts at the chunk).
				first := ch.b0*in.K.Strides[0] + ch.hk0*in.K.Strides[1]
				elem := uint64(t4.Bytes())
				if got := int(kWin.Offset/elem) + int(ap.Offsets[1]); got != first {
					t.Errorf("%s %v chunk %+v: K window at byte %d, offset %d: element %d, want %d", c.name, t4, ch, kWin.Offset, ap.Offsets[1], got, first)
				}
				if t4.Quantized() && kWin.Offset != 0 {
					t.Errorf("%s %v chunk %+v: K window at byte %d, want the whole buffer", c.name, t4, ch, kWin.Offset)
				}
			}
		}
	}
}
