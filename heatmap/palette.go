package heatmap

import (
	"image/color"
	"sync"

	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
)

// PaletteSize is the number of colours in Palette.
const PaletteSize = 256

// ColorMap is the continuous colour map of every picture: Moreland's
// rendering of Kindlmann's map, whose luminance rises monotonically from
// black (0) through purple, blue, green and yellow to white (the largest
// value), so brightness reads as weight in colour and in grey.
func ColorMap(max float64) palette.ColorMap {
	m := moreland.Kindlmann()
	m.SetMin(0)
	m.SetMax(max)
	return m
}

// palette8 is ColorMap sampled at PaletteSize evenly spaced values, in
// 8-bit colour: what the pictures fill cells with and what the viewer's
// colouring kernel looks up, so both show a weight in the same colour.
var palette8 = sync.OnceValue(func() []color.RGBA {
	cs := ColorMap(1).Palette(PaletteSize).Colors()
	out := make([]color.RGBA, len(cs))
	for i, c := range cs {
		out[i] = color.RGBAModel.Convert(c).(color.RGBA)
	}
	return out
})

// Palette returns the PaletteSize colours cells are drawn with; Index says
// which one a value gets.
func Palette() []color.RGBA { return append([]color.RGBA(nil), palette8()...) }

// Index is the Palette entry of v on a scale from 0 to max, the rounding
// gonum's plotter.HeatMap uses: v <= 0 (or max <= 0) is entry 0, v >= max
// the last.
func Index(v, max float64) int {
	if !(max > 0) || !(v > 0) {
		return 0
	}
	if v >= max {
		return PaletteSize - 1
	}
	ps := float64(PaletteSize-1) / max // as plotter.HeatMap computes it
	return int(v*ps + 0.5)
}

// ColorOf is the colour a cell of value v gets on a scale from 0 to max.
func ColorOf(v, max float64) color.RGBA { return palette8()[Index(v, max)] }

// cellPalette is Palette as a gonum palette.Palette.
type cellPalette []color.Color

func (p cellPalette) Colors() []color.Color { return p }

func newCellPalette() cellPalette {
	cs := palette8()
	p := make(cellPalette, len(cs))
	for i, c := range cs {
		p[i] = c
	}
	return p
}
