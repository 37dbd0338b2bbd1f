package viewer

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/heatmap"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/vk"
)

// problem is a small masked grouped-query problem with its float64
// reference weights.
type problem struct {
	in               [3][]float32 // Q, K and V
	shapes           [3][4]int    // theirs, (B,H,L,d) and (B,HKV,S,d)
	opts             vkattn.Options
	weights, vNorms  []float64 // (B,H,L,S); ||v_j|| per (B,HKV,S)
	B, H, HKV, L, S  int
	masked           func(b, i, j int) bool
	dv               int
	contributionTops map[[2]int]float64
}

func newPainterProblem(t *testing.T) *problem {
	const B, H, HKV, L, S, d, dv = 2, 4, 2, 5, 7, 3, 2
	p := &problem{B: B, H: H, HKV: HKV, L: L, S: S, dv: dv}
	p.in, p.shapes = random.QKV(rand.New(rand.NewPCG(13, 5)), random.Normal, B, H, HKV, L, S, d, dv)
	for _, x := range p.in {
		for i := range x {
			x[i] *= 2 // normals of standard deviation 2: sharper weights
		}
	}
	p.opts = vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{S, 4}, WantWeights: true}
	p.masked = func(b, i, j int) bool { return j > i+S-L || j >= p.opts.KeyLengths[b] }
	ref, err := reference.Attention(p.in[0], p.shapes[0], p.in[1], p.shapes[1], p.in[2], p.shapes[2], p.opts)
	if err != nil {
		t.Fatal(err)
	}
	p.weights = ref.Weights
	p.vNorms = make([]float64, B*HKV*S)
	for r := range p.vNorms {
		var s float64
		for _, x := range p.in[2][r*dv : (r+1)*dv] {
			s += float64(x) * float64(x)
		}
		p.vNorms[r] = math.Sqrt(s)
	}
	return p
}

// value is what view v shows at query i, key j, in float64.
func (p *problem) value(v View, i, j int) float64 {
	w := p.weights[((v.Batch*p.H+v.Head)*p.L+i)*p.S+j]
	if v.Contribution {
		w *= p.vNorms[(v.Batch*p.HKV+v.Head/(p.H/p.HKV))*p.S+j]
	}
	return w
}

// TestPainterColoursMatchThePalette colours views on the device, copies
// the picture back and checks every pixel against the palette colour of
// the reference's value (masked cells the colour of 0), and the scale and
// the values read for the title against the reference.
func TestPainterColoursMatchThePalette(t *testing.T) {
	validation := os.Getenv("VKATTN_VALIDATION") == "1"
	before, msgs := vk.LiveObjects(), len(vk.ValidationMessages())
	inst, dev, err := vk.OpenDefault(vk.InstanceConfig{Validation: validation})
	if err != nil {
		t.Fatal(err)
	}
	vdev, err := vkattn.OpenOn(Shared(dev), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := newPainterProblem(t)
	var ts [3]*vkattn.Tensor
	for i, data := range p.in {
		if ts[i], err = vdev.Upload(p.shapes[i][:], data); err != nil {
			t.Fatal(err)
		}
	}
	out, err := vdev.Attention(ts[0], ts[1], ts[2], p.opts)
	if err != nil {
		t.Fatal(err)
	}
	painter, err := NewPainter(dev, out.Weights, ts[2])
	if err != nil {
		t.Fatal(err)
	}
	pix, err := dev.NewBuffer(uint64(4 * p.L * p.S))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := dev.NewCommands(0)
	if err != nil {
		t.Fatal(err)
	}
	pal := heatmap.Palette()
	for _, v := range []View{{0, 0, false}, {1, 3, false}, {1, 1, true}, {0, 2, true}} {
		if err := cmds.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := painter.Record(cmds, v); err != nil {
			t.Fatal(err)
		}
		cmds.CopyImage(painter.Image, pix)
		cmds.Barrier()
		if err := cmds.End(); err != nil {
			t.Fatal(err)
		}
		if err := cmds.Submit(); err != nil {
			t.Fatal(err)
		}
		if err := cmds.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		rgba := make([]byte, 4*p.L*p.S)
		if err := pix.Read(0, rgba); err != nil {
			t.Fatal(err)
		}
		var top float64
		for i := range p.L {
			for j := range p.S {
				top = math.Max(top, p.value(v, i, j))
			}
		}
		got, err := painter.Top()
		if err != nil {
			t.Fatal(err)
		}
		if !verdict.Near(float64(got), top, 1e-5*math.Max(1, top)) {
			t.Errorf("%+v: scale top %v, reference %v", v, got, top)
		}
		for i := range p.L {
			for j := range p.S {
				px := rgba[4*(i*p.S+j):][:4]
				want := p.value(v, i, j)
				k := heatmap.Index(want, top)
				ok := false
				for _, e := range []int{k - 1, k, k + 1} {
					if p.masked(v.Batch, i, j) && e != 0 {
						continue // masked: exactly the colour of 0
					}
					if e >= 0 && e < len(pal) && px[0] == pal[e].R && px[1] == pal[e].G && px[2] == pal[e].B && px[3] == 255 {
						ok = true
					}
				}
				if !ok {
					t.Errorf("%+v cell (%d,%d) value %.4f (masked %v): pixel %v, want palette entry %d %v",
						v, i, j, want, p.masked(v.Batch, i, j), px, k, pal[k])
				}
			}
		}
		for _, c := range [][2]int{{0, 0}, {p.L - 1, p.S - 1}, {2, 3}} {
			got, err := painter.Value(v, c[0], c[1])
			if err != nil {
				t.Fatal(err)
			}
			if want := p.value(v, c[0], c[1]); !verdict.Near(float64(got), want, 1e-5) {
				t.Errorf("%+v: Value(%d,%d) = %v, reference %v", v, c[0], c[1], got, want)
			}
		}
	}
	if err := painter.Record(cmds, View{Batch: 2}); err == nil {
		t.Error("batch 2 of 2: no error")
	}
	cmds.Close()
	pix.Close()
	painter.Close()
	out.Close()
	// vkattn's device frees what it made and leaves the shared device
	// to its owner, who can still use it.
	if err := vdev.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := dev.NewBuffer(64)
	if err != nil {
		t.Fatalf("the shared device after vkattn's Close: %v", err)
	}
	if err := after.WriteFloat32(0, []float32{1, 2}); err != nil {
		t.Fatal(err)
	}
	after.Close()
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	inst.Close()
	if n := vk.LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after Close, want %d", n, before)
	}
	if m := vk.ValidationMessages()[msgs:]; len(m) > 0 {
		t.Errorf("%d validation messages, first: %s", len(m), m[0])
	}
}

// The colour scale's top is the largest cell of a picture of 4200 x 4200
// cells (more than lavapipe's 65,535 loop iterations of the one
// workgroup that finds it, 256 cells a turn, would reach): the largest
// value sits in the last cell.
func TestPainterTopOfALargePicture(t *testing.T) {
	validation := os.Getenv("VKATTN_VALIDATION") == "1"
	inst, dev, err := vk.OpenDefault(vk.InstanceConfig{Validation: validation})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	defer dev.Close()
	vdev, err := vkattn.OpenOn(Shared(dev), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer vdev.Close()
	const L, S = 4200, 4200
	w := make([]float32, L*S)
	w[L*S-1] = 5
	wt, err := vdev.Upload([]int{1, 1, L, S}, w)
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Close()
	vt, err := vdev.Upload([]int{1, 1, S, 1}, make([]float32, S))
	if err != nil {
		t.Fatal(err)
	}
	defer vt.Close()
	painter, err := NewPainter(dev, wt, vt)
	if err != nil {
		t.Fatal(err)
	}
	defer painter.Close()
	cmds, err := dev.NewCommands(0)
	if err != nil {
		t.Fatal(err)
	}
	defer cmds.Close()
	for _, step := range []func() error{cmds.Begin, func() error { return painter.Record(cmds, View{}) }, cmds.End, cmds.Submit,
		func() error { return cmds.Wait(context.Background()) }} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if top, err := painter.Top(); err != nil || top != 5 {
		t.Errorf("top %v, %v; want 5", top, err)
	}
}
