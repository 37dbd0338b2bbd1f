// Package heatmap draws attention weights as pictures: one heat-map panel
// per head in a grid, query positions (or tokens) down the side, key
// positions (or tokens) along the bottom, and a colour bar with its scale.
//
//	w, err := heatmap.NewWeights(shape, data) // (L,S), (H,L,S) or (B,H,L,S)
//	pic, err := heatmap.New(w, heatmap.Options{Heads: []int{0, 3}})
//	err = pic.Write(file, "png")              // or "svg", "pdf"
//
// A large weight on a near-zero value contributes nothing to the output;
// Contribution turns weights a_ij into a_ij * ||v_j||, what each key
// actually adds, to draw instead.
//
// Cells are coloured from Palette (Moreland's Kindlmann map: black at 0,
// white at the top of the scale); the viewer of cmd/vkattn colours with
// the same entries, so a weight looks the same in a file and in a window.
package heatmap

import (
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Weights are attention weights of shape (B, H, L, S), row-major: batch
// items, heads, query positions, key positions.
type Weights struct {
	Shape [4]int
	Data  []float32
}

// NewWeights checks data against a shape of rank 2 (L,S), 3 (H,L,S) or 4
// (B,H,L,S); missing leading axes are 1.
func NewWeights(shape []int, data []float32) (Weights, error) {
	s, err := fill4("weights", shape)
	if err != nil {
		return Weights{}, err
	}
	if n := s[0] * s[1] * s[2] * s[3]; n != len(data) {
		return Weights{}, fmt.Errorf("heatmap: weights of shape %v need %d values, got %d", shape, n, len(data))
	}
	return Weights{Shape: s, Data: data}, nil
}

// fill4 pads a rank 2-4 shape with leading 1s.
func fill4(name string, shape []int) ([4]int, error) {
	var s [4]int
	if len(shape) < 2 || len(shape) > 4 {
		return s, fmt.Errorf("heatmap: %s of shape %v: want rank 2, 3 or 4", name, shape)
	}
	s = [4]int{1, 1, 1, 1}
	copy(s[4-len(shape):], shape)
	for _, n := range s {
		if n <= 0 {
			return s, fmt.Errorf("heatmap: %s of shape %v: every axis must be positive", name, shape)
		}
	}
	return s, nil
}

// At is the weight of batch item b, head h, query i, key j.
func (w Weights) At(b, h, i, j int) float32 {
	s := w.Shape
	return w.Data[((b*s[1]+h)*s[2]+i)*s[3]+j]
}

// Contribution returns a_ij * ||v_j||: each weight times the Euclidean
// norm of the value row it weights, for values v of shape (S,d_v),
// (H_kv,S,d_v) or (B,H_kv,S,d_v) as attention takes them (H_kv dividing H;
// query head h reads value head h / (H/H_kv)).
func Contribution(w Weights, vShape []int, v []float32) (Weights, error) {
	vs, err := fill4("values", vShape)
	if err != nil {
		return Weights{}, err
	}
	if n := vs[0] * vs[1] * vs[2] * vs[3]; n != len(v) {
		return Weights{}, fmt.Errorf("heatmap: values of shape %v need %d values, got %d", vShape, n, len(v))
	}
	B, H, L, S := w.Shape[0], w.Shape[1], w.Shape[2], w.Shape[3]
	switch {
	case vs[0] != B && vs[0] != 1:
		return Weights{}, fmt.Errorf("heatmap: values have %d batch items, weights %d", vs[0], B)
	case H%vs[1] != 0:
		return Weights{}, fmt.Errorf("heatmap: values have %d heads, which does not divide the weights' %d", vs[1], H)
	case vs[2] != S:
		return Weights{}, fmt.Errorf("heatmap: values have %d rows, the weights %d keys", vs[2], S)
	}
	dv, group := vs[3], H/vs[1]
	out := Weights{Shape: w.Shape, Data: make([]float32, len(w.Data))}
	norm := make([]float64, S)
	for b := range B {
		for h := range H {
			vb, vh := min(b, vs[0]-1), h/group
			for j := range S {
				row := v[((vb*vs[1]+vh)*S+j)*dv:][:dv]
				var sum float64
				for _, x := range row {
					sum += float64(x) * float64(x)
				}
				norm[j] = math.Sqrt(sum)
			}
			for i := range L {
				for j := range S {
					k := ((b*H+h)*L+i)*S + j
					out.Data[k] = float32(float64(w.Data[k]) * norm[j])
				}
			}
		}
	}
	return out, nil
}

// Options say what to draw.
type Options struct {
	Batch   int      // the batch item drawn
	Heads   []int    // heads drawn, one panel each; nil for every head
	TokensQ []string // labels of the query positions (L of them); nil for numbers
	TokensK []string // labels of the key positions (S of them)
	// Max is the top of the colour scale; 0 means the largest value drawn.
	// Values above it get the last colour.
	Max   float64
	Title string // the picture's title; "" for "attention weights"
	Label string // the colour bar's label; "" for "weight"
}

// Picture is a laid-out heat map, ready to be written in any format.
type Picture struct {
	Width, Height vg.Length
	Max           float64 // the top of the colour scale used
	Panels        []Panel

	title  string
	plots  [][]*plot.Plot
	tiles  [][]draw.Canvas
	bar    *plot.Plot
	barC   draw.Canvas
	titleY vg.Length
}

// Panel is one head's heat map: Data is the area its cells fill, in points
// from the picture's bottom-left corner. Query 0 is the top row, key 0 the
// left column.
type Panel struct {
	Head int
	Data vg.Rectangle
}

// DPI is the resolution of PNG pictures.
const DPI = 96

// PixelRect is panel i's cell area in the pixels of a PNG of the picture
// (origin top-left).
func (p *Picture) PixelRect(i int) image.Rectangle {
	px := func(l vg.Length) int { return int(math.Round(float64(l) * DPI / 72)) }
	d := p.Panels[i].Data
	h := px(p.Height)
	return image.Rect(px(d.Min.X), h-px(d.Max.Y), px(d.Max.X), h-px(d.Min.Y))
}

// Layout, in points.
const (
	tileSize  = 8 * vg.Centimeter
	barWidth  = 2.6 * vg.Centimeter
	titleSize = 1.2 * vg.Centimeter
	// rasterCells: grids with more cells are drawn as one image (a
	// vector file of a million rectangles is unusable).
	rasterCells = 96 * 96
	// maxLabels bounds the tick labels along an axis.
	maxLabels = 48
)

// New lays out the panels of w that o asks for.
func New(w Weights, o Options) (*Picture, error) {
	B, H, L, S := w.Shape[0], w.Shape[1], w.Shape[2], w.Shape[3]
	if len(w.Data) != B*H*L*S {
		return nil, fmt.Errorf("heatmap: weights of shape %v need %d values, got %d", w.Shape, B*H*L*S, len(w.Data))
	}
	if o.Batch < 0 || o.Batch >= B {
		return nil, fmt.Errorf("heatmap: batch item %d out of range: the weights have %d", o.Batch, B)
	}
	heads := o.Heads
	if heads == nil {
		for h := range H {
			heads = append(heads, h)
		}
	}
	if len(heads) == 0 {
		return nil, errors.New("heatmap: no heads to draw")
	}
	for _, h := range heads {
		if h < 0 || h >= H {
			return nil, fmt.Errorf("heatmap: head %d out of range: the weights have %d", h, H)
		}
	}
	if o.TokensQ != nil && len(o.TokensQ) != L {
		return nil, fmt.Errorf("heatmap: %d query tokens for %d query positions", len(o.TokensQ), L)
	}
	if o.TokensK != nil && len(o.TokensK) != S {
		return nil, fmt.Errorf("heatmap: %d key tokens for %d key positions", len(o.TokensK), S)
	}
	if math.IsNaN(o.Max) || math.IsInf(o.Max, 0) || o.Max < 0 {
		return nil, fmt.Errorf("heatmap: colour scale top %v: want a positive number, or 0 for the largest value", o.Max)
	}
	top := o.Max
	if top == 0 {
		for _, h := range heads {
			for i := range L {
				for j := range S {
					v := float64(w.At(o.Batch, h, i, j))
					if math.IsNaN(v) || math.IsInf(v, 0) {
						return nil, fmt.Errorf("heatmap: batch %d head %d query %d key %d is %v", o.Batch, h, i, j, v)
					}
					top = math.Max(top, v)
				}
			}
		}
		if top == 0 {
			top = 1 // every cell zero (fully masked): draw them the colour of 0
		}
	}

	cols := int(math.Ceil(math.Sqrt(float64(len(heads)))))
	rows := (len(heads) + cols - 1) / cols
	pic := &Picture{
		Width:  vg.Length(cols)*tileSize + barWidth,
		Height: vg.Length(rows)*tileSize + titleSize,
		Max:    top,
		title:  o.Title,
	}
	if pic.title == "" {
		pic.title = "attention weights"
	}
	if B > 1 {
		pic.title += fmt.Sprintf(", batch item %d", o.Batch)
	}
	pal := newCellPalette()
	pic.plots = make([][]*plot.Plot, rows)
	for r := range pic.plots {
		pic.plots[r] = make([]*plot.Plot, cols)
	}
	for n, h := range heads {
		pic.plots[n/cols][n%cols] = headPlot(w, o, h, top, pal)
	}

	// Lay out on a canvas of the picture's size; Write draws into the same
	// rectangles on the real canvas.
	full := draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: pic.Width, Y: pic.Height}}}
	gridArea := draw.Crop(full, 0, -barWidth, 0, -titleSize)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 3,
		PadLeft: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4}
	pic.tiles = plot.Align(pic.plots, tiles, gridArea)
	top0, bottom := vg.Length(0), pic.Height
	for r, row := range pic.plots {
		for c, p := range row {
			if p == nil {
				continue
			}
			d := p.DataCanvas(pic.tiles[r][c]).Rectangle
			pic.Panels = append(pic.Panels, Panel{Head: heads[r*cols+c], Data: d})
			top0, bottom = max(top0, d.Max.Y), min(bottom, d.Min.Y)
		}
	}
	pic.titleY = pic.Height - titleSize/2

	bar := plot.New()
	bar.Add(&plotter.ColorBar{ColorMap: ColorMap(top), Vertical: true, Colors: PaletteSize})
	bar.HideX()
	bar.X.Padding, bar.Y.Padding = 0, 0
	bar.Y.Min, bar.Y.Max = 0, top
	bar.Y.Label.Text = o.Label
	if bar.Y.Label.Text == "" {
		bar.Y.Label.Text = "weight"
	}
	pic.bar = bar
	// The bar spans the panels' cell areas from the top row to the bottom.
	pic.barC = draw.Crop(full, pic.Width-barWidth+vg.Centimeter/4, -vg.Centimeter/2, 0, 0)
	pic.barC.Min.Y, pic.barC.Max.Y = bottom, top0
	return pic, nil
}

// grid is one head of w as a gonum GridXYZ: column c is key c, row r is
// query L-1-r, so that query 0 is drawn at the top.
type grid struct {
	w    Weights
	b, h int
}

func (g grid) Dims() (c, r int) { return g.w.Shape[3], g.w.Shape[2] }
func (g grid) Z(c, r int) float64 {
	return float64(g.w.At(g.b, g.h, g.w.Shape[2]-1-r, c))
}
func (g grid) X(c int) float64 { return float64(c) }
func (g grid) Y(r int) float64 { return float64(r) }

// positionTicks labels n positions with tokens (every one, or every k-th
// when there are too many) or with numbers at a round step. flip maps
// position i to axis value n-1-i (the query axis).
func positionTicks(n int, tokens []string, flip bool) plot.Ticker {
	at := func(i int) float64 {
		if flip {
			return float64(n - 1 - i)
		}
		return float64(i)
	}
	step := 1
	if tokens != nil {
		step = (n + maxLabels - 1) / maxLabels
	} else {
		for _, s := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000} {
			step = s
			if n/s <= 8 {
				break
			}
		}
	}
	var ticks plot.ConstantTicks
	for i := 0; i < n; i += step {
		label := strconv.Itoa(i)
		if tokens != nil {
			label = tokens[i]
		}
		ticks = append(ticks, plot.Tick{Value: at(i), Label: label})
	}
	return ticks
}

// Format is the picture format named by path's extension: png, svg or pdf.
func Format(path string) (string, error) {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	switch ext {
	case "png", "svg", "pdf":
		return ext, nil
	}
	return "", fmt.Errorf("heatmap: %s: unknown picture format %q; want .png, .svg or .pdf", path, filepath.Ext(path))
}

// Write draws the picture to w as format (png, svg or pdf).
func (p *Picture) Write(w io.Writer, format string) error {
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(p.Width, p.Height), vgimg.UseDPI(DPI))}
	case "svg":
		c = vgsvg.New(p.Width, p.Height)
	case "pdf":
		c = vgpdf.New(p.Width, p.Height)
	default:
		return fmt.Errorf("heatmap: unknown picture format %q; want png, svg or pdf", format)
	}
	dc := draw.New(c)
	for r, row := range p.plots {
		for col, pl := range row {
			if pl == nil {
				continue
			}
			t := p.tiles[r][col]
			t.Canvas = dc.Canvas
			pl.Draw(t)
		}
	}
	bc := p.barC
	bc.Canvas = dc.Canvas
	p.bar.Draw(bc)
	sty := plot.New().Title.TextStyle // the default title font
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
	dc.FillText(sty, vg.Point{X: (p.Width - barWidth) / 2, Y: p.titleY}, p.title)
	_, err := c.WriteTo(w)
	return err
}

// headPlot is the panel of head h: its weights in pal's colours from 0 to
// top, the positions (or tokens) on the axes.
func headPlot(w Weights, o Options, h int, top float64, pal cellPalette) *plot.Plot {
	L, S := w.Shape[2], w.Shape[3]
	p := plot.New()
	p.Title.Text = fmt.Sprintf("head %d", h)
	hm := plotter.NewHeatMap(grid{w: w, b: o.Batch, h: h}, pal)
	hm.Min, hm.Max = 0, top
	hm.Underflow, hm.Overflow = pal[0], pal[len(pal)-1]
	hm.Rasterized = L*S > rasterCells
	p.Add(hm)
	p.X.Padding, p.Y.Padding = 0, 0
	p.X.Min, p.X.Max = -0.5, float64(S)-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(L)-0.5
	p.X.Tick.Marker = positionTicks(S, o.TokensK, false)
	p.Y.Tick.Marker = positionTicks(L, o.TokensQ, true)
	p.X.Label.Text, p.Y.Label.Text = "key position", "query position"
	if o.TokensK != nil {
		p.X.Label.Text = "key"
		p.X.Tick.Label.Rotation = math.Pi / 2
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	if o.TokensQ != nil {
		p.Y.Label.Text = "query"
	}
	return p
}
