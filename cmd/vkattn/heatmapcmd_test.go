package main

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/heatmap"
	"github.com/vkattn/vkattn/reference"
)

// decodePNG reads a PNG file.
func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return pngImage(t, path, f)
}

// pngImage decodes a PNG (a file's or a screenshot's: what, for errors).
func pngImage(t *testing.T, what string, r io.Reader) image.Image {
	t.Helper()
	img, err := png.Decode(r)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return img
}

// normals returns a generator, seeded with the PCG seeds seed1 and seed2,
// of n standard normal values times scale.
func normals(seed1, seed2 uint64) func(n int, scale float64) []float32 {
	rng := rand.New(rand.NewPCG(seed1, seed2))
	return func(n int, scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(scale * rng.NormFloat64())
		}
		return x
	}
}

// checkPicture checks every cell of img, a PNG of w drawn with o, against
// the palette colour of its weight: cells are located from the panel
// rectangles of the same layout, colours from the known weights.
func checkPicture(t *testing.T, img image.Image, w heatmap.Weights, o heatmap.Options) {
	t.Helper()
	pic, err := heatmap.New(w, o)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != int(math.Round(float64(pic.Width)*heatmap.DPI/72)) {
		t.Fatalf("PNG %d pixels wide; the layout is %v points", b.Dx(), pic.Width)
	}
	pal := heatmap.Palette()
	L, S := w.Shape[2], w.Shape[3]
	for n, p := range pic.Panels {
		r := pic.PixelRect(n)
		for i := range L {
			for j := range S {
				x := r.Min.X + int((float64(j)+0.5)*float64(r.Dx())/float64(S))
				y := r.Min.Y + int((float64(i)+0.5)*float64(r.Dy())/float64(L))
				got := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
				k := heatmap.Index(float64(w.At(o.Batch, p.Head, i, j)), pic.Max)
				ok := false
				for _, e := range []int{k - 1, k, k + 1} {
					if e >= 0 && e < len(pal) && closeRGB(got, pal[e], 2) {
						ok = true
					}
				}
				if !ok {
					t.Errorf("head %d cell (%d,%d) weight %.4f: pixel %v, want palette entry %d %v",
						p.Head, i, j, w.At(o.Batch, p.Head, i, j), got, k, pal[k])
				}
			}
		}
	}
}

func closeRGB(a, b color.RGBA, tol int) bool {
	d := func(x, y uint8) bool { return int(x)-int(y) <= tol && int(y)-int(x) <= tol }
	return d(a.R, b.R) && d(a.G, b.G) && d(a.B, b.B)
}

func TestHeatmapCommand(t *testing.T) {
	dir := t.TempDir()
	// Two heads of (3, 4): head 0 attends to key i, head 1 uniformly.
	data := make([]float32, 2*3*4)
	for i := range 3 {
		data[i*4+i] = 1
		for j := range 4 {
			data[12+i*4+j] = 0.25
		}
	}
	wPath := writeArray(t, dir, "w.npy", []int{2, 3, 4}, data)
	w, _ := heatmap.NewWeights([]int{2, 3, 4}, data)

	out := filepath.Join(dir, "heat.png")
	stdout, errOut, code := cli(t, "heatmap", "--weights", wPath, "-o", out)
	if code != 0 || !strings.Contains(stdout, "2 panel(s), colour scale 0 to 1") {
		t.Fatalf("exit %d: %s\n%s", code, errOut, stdout)
	}
	checkPicture(t, decodePNG(t, out), w, heatmap.Options{})

	// One head, tokens from a list and a file, a fixed scale.
	keys := filepath.Join(dir, "keys.txt")
	os.WriteFile(keys, []byte("w\nx\ny\nz\n"), 0o644)
	if _, errOut, code := cli(t, "heatmap", "--weights", wPath, "-o", out, "--heads", "1",
		"--tokens-q", "a,b,c", "--tokens-k", "@"+keys, "--max", "0.5"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkPicture(t, decodePNG(t, out), w, heatmap.Options{Heads: []int{1}, Max: 0.5,
		TokensQ: []string{"a", "b", "c"}, TokensK: []string{"w", "x", "y", "z"}})

	// Contribution: value rows of norms 0, 1, 2, 3 (one value head).
	vPath := writeArray(t, dir, "v.npy", []int{4, 1}, []float32{0, 1, -2, 3})
	if _, errOut, code := cli(t, "heatmap", "--weights", wPath, "-o", out, "--contribution", vPath); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	c, _ := heatmap.Contribution(w, []int{4, 1}, []float32{0, 1, -2, 3})
	if c.At(0, 1, 2, 3) != 0.75 || c.At(0, 0, 2, 2) != 2 {
		t.Fatalf("contribution %v %v, want 0.75 and 2", c.At(0, 1, 2, 3), c.At(0, 0, 2, 2))
	}
	checkPicture(t, decodePNG(t, out), c, heatmap.Options{})

	for ext, magic := range map[string]string{".svg": "<svg", ".pdf": "%PDF"} {
		p := filepath.Join(dir, "heat"+ext)
		if _, errOut, code := cli(t, "heatmap", "--weights", wPath, "-o", p); code != 0 {
			t.Fatalf("%s: exit %d: %s", ext, code, errOut)
		}
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b[:min(len(b), 200)]), magic) {
			t.Errorf("%s file does not start with %q", ext, magic)
		}
	}
}

func TestHeatmapRefusals(t *testing.T) {
	dir := t.TempDir()
	wPath := writeArray(t, dir, "w.npy", []int{2, 3}, []float32{1, 0, 0, 0, 1, 0})
	out := filepath.Join(dir, "heat.png")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-o", out}, exitUsage, "--weights and -o are required"},
		{[]string{"--weights", wPath, "-o", filepath.Join(dir, "heat.gif")}, exitUsage, "want a name ending in .png, .svg or .pdf"},
		{[]string{"--weights", wPath, "-o", out, "--heads", "1"}, exitFail, "head 1 out of range"},
		{[]string{"--weights", wPath, "-o", out, "--batch", "2"}, exitFail, "batch item 2 out of range"},
		{[]string{"--weights", wPath, "-o", out, "--tokens-q", "a,b,c"}, exitFail, "3 query tokens for 2 query positions"},
		{[]string{"--weights", wPath, "-o", out, "--tokens-k", "@" + filepath.Join(dir, "none.txt")}, exitFail, "none.txt"},
		{[]string{"--weights", wPath, "-o", out, "--max", "0"}, exitUsage, "want a positive number"},
		{[]string{"--weights", wPath, "-o", out, "--contribution", wPath}, exitFail, "values have 2 rows, the weights 3 keys"},
		{[]string{"--weights", wPath, "-o", filepath.Join(dir, "no", "heat.png")}, exitFail, "does not exist"},
	} {
		checkRefused(t, append([]string{"heatmap"}, c.args...), c.code, c.want, out)
	}
	if stdout, _, code := cli(t, "heatmap", "-h"); code != 0 || !strings.Contains(stdout, "Example") || !strings.Contains(stdout, "--contribution") {
		t.Errorf("heatmap -h: exit %d\n%s", code, stdout)
	}
}

// run --heatmap draws the weights the device computed: every cell of the
// picture is the colour of the float64 reference's weight, masked cells
// the colour of zero.
func TestRunHeatmap(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	const H, L, S, d = 2, 4, 5, 3
	rnd := normals(13, 1)
	qd, kd, vd := rnd(H*L*d, 1), rnd(H*S*d, 1), rnd(H*S*d, 1)
	q := writeArray(t, dir, "q.npy", []int{H, L, d}, qd)
	k := writeArray(t, dir, "k.npy", []int{H, S, d}, kd)
	v := writeArray(t, dir, "v.npy", []int{H, S, d}, vd)
	out := filepath.Join(dir, "heat.png")
	stdout, errOut, code := cli(t, "run", "-q", q, "-k", k, "-v", v, "--causal", "top-left", "--heatmap", out, "-o", filepath.Join(dir, "o.npy"))
	if code != 0 || !strings.Contains(stdout, "wrote heat map") {
		t.Fatalf("exit %d: %s\n%s", code, errOut, stdout)
	}
	opts := vkattn.Options{Causal: vkattn.CausalTopLeft, WantWeights: true}
	ref, err := reference.Attention(qd, [4]int{1, H, L, d}, kd, [4]int{1, H, S, d}, vd, [4]int{1, H, S, d}, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(ref.Weights))
	for i, x := range ref.Weights {
		want[i] = float32(x)
		if j, i := i%S, (i/S)%L; j > i && x != 0 {
			t.Fatalf("reference weight of masked cell (%d,%d) is %v", i, j, x)
		}
	}
	w, _ := heatmap.NewWeights([]int{1, H, L, S}, want)
	checkPicture(t, decodePNG(t, out), w, heatmap.Options{})

	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v, "--heatmap", filepath.Join(dir, "heat.jpg")},
		exitUsage, "--heatmap", filepath.Join(dir, "heat.jpg"))
}
