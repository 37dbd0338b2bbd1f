package heatmap

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/internal/verdict"
)

// render draws w with o as a PNG and decodes it.
func render(t *testing.T, w Weights, o Options) (*Picture, image.Image) {
	t.Helper()
	pic, err := New(w, o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := pic.Write(&buf, "png"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return pic, img
}

// cellPixel is the pixel at the centre of cell (i, j) of panel n, located
// from the panel's cell area alone: L rows from the top, S columns from
// the left.
func cellPixel(pic *Picture, img image.Image, n, i, j, L, S int) color.RGBA {
	r := pic.PixelRect(n)
	x := r.Min.X + int((float64(j)+0.5)*float64(r.Dx())/float64(S))
	y := r.Min.Y + int((float64(i)+0.5)*float64(r.Dy())/float64(L))
	return color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
}

// near reports whether got is within 2 of want in every channel.
func near(got, want color.RGBA) bool {
	d := func(a, b uint8) bool { return math.Abs(float64(a)-float64(b)) <= 2 }
	return d(got.R, want.R) && d(got.G, want.G) && d(got.B, want.B)
}

// nearEntry reports whether got is the palette colour of index k or of a
// neighbour (float32 weights can round across an entry boundary).
func nearEntry(got color.RGBA, k int) bool {
	pal := Palette()
	for _, i := range []int{k - 1, k, k + 1} {
		if i >= 0 && i < len(pal) && near(got, pal[i]) {
			return true
		}
	}
	return false
}

func TestPaletteDarkToBright(t *testing.T) {
	pal := Palette()
	if len(pal) != PaletteSize {
		t.Fatalf("%d colours, want %d", len(pal), PaletteSize)
	}
	if pal[0] != (color.RGBA{0, 0, 0, 255}) || pal[PaletteSize-1] != (color.RGBA{255, 255, 255, 255}) {
		t.Errorf("ends %v and %v, want black and white", pal[0], pal[PaletteSize-1])
	}
	// Perceptual: CIE lightness L* rises across the map (allowing 8-bit
	// rounding), so brightness orders the weights.
	lightness := func(c color.RGBA) float64 {
		lin := func(u uint8) float64 {
			v := float64(u) / 255
			if v <= 0.04045 {
				return v / 12.92
			}
			return math.Pow((v+0.055)/1.055, 2.4)
		}
		y := 0.2126*lin(c.R) + 0.7152*lin(c.G) + 0.0722*lin(c.B)
		if y <= 216.0/24389 {
			return y * 24389 / 27
		}
		return 116*math.Cbrt(y) - 16
	}
	for i := 8; i < PaletteSize; i += 8 {
		if lightness(pal[i]) <= lightness(pal[i-8]) {
			t.Errorf("lightness falls from entry %d (%v) to %d (%v)", i-8, pal[i-8], i, pal[i])
		}
	}
	if Index(0, 1) != 0 || Index(1, 1) != PaletteSize-1 || Index(0.5, 1) != 128 || Index(2, 1) != PaletteSize-1 || Index(0.3, 0) != 0 {
		t.Errorf("Index(0,1)=%d Index(1,1)=%d Index(0.5,1)=%d Index(2,1)=%d Index(0.3,0)=%d",
			Index(0, 1), Index(1, 1), Index(0.5, 1), Index(2, 1), Index(0.3, 0))
	}
}

// diagonal is n x n weights of 1 on the diagonal, 0 elsewhere.
func diagonal(n int) []float32 {
	data := make([]float32, n*n)
	for i := range n {
		data[i*n+i] = 1
	}
	return data
}

func TestDiagonalWeightsDrawABrightDiagonal(t *testing.T) {
	const n = 6
	w, err := NewWeights([]int{n, n}, diagonal(n))
	if err != nil {
		t.Fatal(err)
	}
	pic, img := render(t, w, Options{})
	if len(pic.Panels) != 1 || pic.Max != 1 {
		t.Fatalf("%d panels, scale top %v; want 1 panel, top 1", len(pic.Panels), pic.Max)
	}
	pal := Palette()
	for i := range n {
		for j := range n {
			got := cellPixel(pic, img, 0, i, j, n, n)
			want := pal[0]
			if i == j {
				want = pal[PaletteSize-1]
			}
			if !near(got, want) {
				t.Errorf("cell (%d,%d): pixel %v, want %v", i, j, got, want)
			}
		}
	}
}

// softmaxCausal is float64 causal attention weights of random scores for
// H heads of L queries and S keys (top-left: query i sees keys j <= i).
func softmaxCausal(H, L, S int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, H*L*S)
	for h := range H {
		for i := range L {
			row := out[(h*L+i)*S:][:S]
			e := make([]float64, S)
			var sum float64
			for j := 0; j <= i && j < S; j++ {
				e[j] = math.Exp(2 * rng.NormFloat64())
				sum += e[j]
			}
			for j := range row {
				row[j] = float32(e[j] / sum)
			}
		}
	}
	return out
}

func TestCellsHaveTheColourOfTheirWeightAndMaskedCellsOfZero(t *testing.T) {
	const H, L, S = 3, 5, 7
	data := softmaxCausal(H, L, S, 7)
	w, err := NewWeights([]int{1, H, L, S}, data)
	if err != nil {
		t.Fatal(err)
	}
	pic, img := render(t, w, Options{Heads: []int{2, 0}, TokensK: strings.Split("a,b,c,d,e,f,g", ",")})
	var top float64
	for _, h := range []int{2, 0} {
		for k := range L * S {
			top = math.Max(top, float64(data[h*L*S+k]))
		}
	}
	if pic.Max != top {
		t.Errorf("scale top %v, want the largest drawn weight %v", pic.Max, top)
	}
	if len(pic.Panels) != 2 || pic.Panels[0].Head != 2 || pic.Panels[1].Head != 0 {
		t.Fatalf("panels %+v, want heads 2 and 0", pic.Panels)
	}
	zero := Palette()[0]
	for n, p := range pic.Panels {
		for i := range L {
			for j := range S {
				got := cellPixel(pic, img, n, i, j, L, S)
				v := float64(w.At(0, p.Head, i, j))
				if j > i {
					if !near(got, zero) {
						t.Errorf("head %d masked cell (%d,%d): pixel %v, want the colour of 0 %v", p.Head, i, j, got, zero)
					}
					continue
				}
				if !nearEntry(got, Index(v, top)) {
					t.Errorf("head %d cell (%d,%d) weight %.4f: pixel %v, want palette entry %d %v",
						p.Head, i, j, v, got, Index(v, top), ColorOf(v, top))
				}
			}
		}
	}
}

func TestFixedScaleTop(t *testing.T) {
	w, _ := NewWeights([]int{1, 2}, []float32{0.25, 0.75})
	pic, img := render(t, w, Options{Max: 0.5})
	if pic.Max != 0.5 {
		t.Fatalf("scale top %v, want 0.5", pic.Max)
	}
	// 0.25 is half way; 0.75 is above the top and gets the last colour.
	if got := cellPixel(pic, img, 0, 0, 0, 1, 2); !nearEntry(got, Index(0.25, 0.5)) {
		t.Errorf("0.25 on a scale to 0.5: pixel %v, want entry %d", got, Index(0.25, 0.5))
	}
	if got := cellPixel(pic, img, 0, 0, 1, 1, 2); !near(got, Palette()[PaletteSize-1]) {
		t.Errorf("0.75 above the top: pixel %v, want the last colour", got)
	}
}

func TestContributionWeighsByValueNorm(t *testing.T) {
	// Two query heads share one value head (multi-query); value rows of
	// norms 0, 1, 5 (3-4-0) and 2.
	w, _ := NewWeights([]int{2, 1, 4}, []float32{0.25, 0.25, 0.25, 0.25, 1, 0, 0, 0})
	v := []float32{0, 0, 1, 0, 3, 4, 0, 2}
	c, err := Contribution(w, []int{1, 4, 2}, v)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 0.25, 1.25, 0.5, 0, 0, 0, 0}
	for i := range want {
		if !verdict.Near(float64(c.Data[i]), float64(want[i]), 1e-6) {
			t.Errorf("contribution %d = %v, want %v", i, c.Data[i], want[i])
		}
	}
	if _, err := Contribution(w, []int{3, 2}, make([]float32, 6)); err == nil {
		t.Error("values with 3 rows for 4 keys: no error")
	}
	if _, err := Contribution(w, []int{3, 4, 2}, make([]float32, 24)); err == nil {
		t.Error("3 value heads for 2 query heads: no error")
	}
}

func TestVectorFormats(t *testing.T) {
	w, _ := NewWeights([]int{2, 3}, []float32{0.5, 0.5, 0, 0.2, 0.3, 0.5})
	pic, err := New(w, Options{TokensQ: []string{"x", "y"}})
	if err != nil {
		t.Fatal(err)
	}
	for format, magic := range map[string]string{"svg": "<svg", "pdf": "%PDF"} {
		var buf bytes.Buffer
		if err := pic.Write(&buf, format); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if !strings.Contains(buf.String()[:min(buf.Len(), 200)], magic) {
			t.Errorf("%s output does not start with %q: %.40q", format, magic, buf.String())
		}
	}
	for path, want := range map[string]string{"a/heat.PNG": "png", "h.svg": "svg", "h.pdf": "pdf", "h.gif": ""} {
		got, err := Format(path)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("Format(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
}

func TestLargeGridIsRasterized(t *testing.T) {
	const n = 200
	w, _ := NewWeights([]int{n, n}, diagonal(n))
	pic, img := render(t, w, Options{})
	if b := img.Bounds(); b.Dx() != int(math.Round(float64(pic.Width)*DPI/72)) {
		t.Errorf("PNG %d pixels wide, picture %v points", b.Dx(), pic.Width)
	}
	// Cells are under 2 pixels and the image is resampled: compare the
	// mean brightness along the diagonal and the anti-diagonal.
	r := pic.PixelRect(0)
	var diag, anti float64
	for k := 2; k < r.Dx()-2; k++ {
		y := r.Min.Y + k*r.Dy()/r.Dx()
		a := color.RGBAModel.Convert(img.At(r.Min.X+k, y)).(color.RGBA)
		b := color.RGBAModel.Convert(img.At(r.Max.X-1-k, y)).(color.RGBA)
		diag += float64(a.R) + float64(a.G) + float64(a.B)
		anti += float64(b.R) + float64(b.G) + float64(b.B)
	}
	count := 3 * float64(r.Dx()-4)
	if !(diag/count >= 100 && anti/count <= 20) { // NaN (no pixel compared) fails too
		t.Errorf("mean brightness %.0f on the diagonal, %.0f on the anti-diagonal; want > 100 and < 20", diag/count, anti/count)
	}
}

func TestBadOptionsAreErrors(t *testing.T) {
	w, _ := NewWeights([]int{2, 2, 3}, make([]float32, 12))
	for name, o := range map[string]Options{
		"batch":    {Batch: 1},
		"head":     {Heads: []int{2}},
		"no heads": {Heads: []int{}},
		"tokens q": {TokensQ: []string{"a"}},
		"tokens k": {TokensK: []string{"a", "b"}},
		"max":      {Max: math.Inf(1)},
	} {
		if _, err := New(w, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewWeights([]int{2, 2}, make([]float32, 3)); err == nil {
		t.Error("3 values for shape (2,2): no error")
	}
	if _, err := NewWeights([]int{4}, make([]float32, 4)); err == nil {
		t.Error("rank 1: no error")
	}
}
