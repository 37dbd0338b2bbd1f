package main

import (
	"bufio"
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/vkattn/vkattn"
)

// plotFormat is the image format gonum/plot writes for path's extension.
func plotFormat(path string) (string, bool) {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	switch ext {
	case "png", "svg", "pdf", "eps", "jpg", "jpeg", "tif", "tiff":
		return ext, true
	}
	return "", false
}

// benchSeries groups results that belong on one line: everything but S
// alike (d, heads, batch, causal), and L either equal to S or fixed.
type benchSeries struct {
	key    string
	label  string
	points plotter.XYs
}

func seriesOf(r benchResult) (key, label string) {
	d := r.Dims
	l := "L=S"
	if d.L != d.S {
		l = "L=" + strconv.Itoa(d.L)
	}
	key = fmt.Sprintf("%d/%d/%d/%d/%d/%s/%s", d.DK, d.DV, d.B, d.H, d.HKV, l, r.Causal)

	var b strings.Builder
	if d.DK == d.DV {
		fmt.Fprintf(&b, "d=%d", d.DK)
	} else {
		fmt.Fprintf(&b, "d_k=%d d_v=%d", d.DK, d.DV)
	}
	if d.B != 1 {
		fmt.Fprintf(&b, " B=%d", d.B)
	}
	if d.HKV != d.H {
		fmt.Fprintf(&b, " H=%d H_kv=%d", d.H, d.HKV)
	} else {
		fmt.Fprintf(&b, " H=%d", d.H)
	}
	if d.L != d.S {
		fmt.Fprintf(&b, " %s", l)
	}
	switch r.Causal {
	case vkattn.CausalBottomRight.String():
		b.WriteString(" causal")
	case vkattn.CausalTopLeft.String():
		b.WriteString(" causal top-left")
	}
	return key, b.String()
}

// newBenchPlot draws GFLOP/s against S, one line per series, with S on a
// log2 axis.
func newBenchPlot(device string, rs []benchResult) (*plot.Plot, error) {
	var series []*benchSeries
	byKey := map[string]*benchSeries{}
	minS, maxS, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, r := range rs {
		key, label := seriesOf(r)
		s := byKey[key]
		if s == nil {
			s = &benchSeries{key: key, label: label}
			byKey[key] = s
			series = append(series, s)
		}
		x := float64(r.Dims.S)
		s.points = append(s.points, plotter.XY{X: x, Y: r.GFLOPS})
		minS, maxS, maxY = math.Min(minS, x), math.Max(maxS, x), math.Max(maxY, r.GFLOPS)
	}

	p := plot.New()
	p.Title.Text = "vkattn attention throughput\n" + device
	p.X.Label.Text = "sequence length S (keys)"
	p.Y.Label.Text = "GFLOP/s (4*B*H*L*S*d, halved when causal)"
	var args []any
	for _, s := range series {
		slices.SortStableFunc(s.points, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		args = append(args, s.label, s.points)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true

	// Powers of two around the measured S on a log axis; a single S gets an
	// octave either side.
	lo, hi := math.Floor(math.Log2(minS)), math.Ceil(math.Log2(maxS))
	if lo == hi {
		lo, hi = lo-1, hi+1
	}
	p.X.Scale = plot.LogScale{}
	p.X.Min, p.X.Max = math.Exp2(lo)/1.1, math.Exp2(hi)*1.1 // markers clear of the frame
	var ticks plot.ConstantTicks
	for e := lo; e <= hi; e++ {
		ticks = append(ticks, plot.Tick{Value: math.Exp2(e), Label: strconv.Itoa(int(math.Exp2(e)))})
	}
	p.X.Tick.Marker = ticks
	p.Y.Min = 0
	if maxY > 0 {
		p.Y.Max = maxY * 1.15 // room for the legend
	} else {
		p.Y.Max = 1
	}
	return p, nil
}

// writePlot draws rs to path, atomically (writeFileAtomic).
func writePlot(path, device string, rs []benchResult) error {
	format, ok := plotFormat(path)
	if !ok {
		return fmt.Errorf("%s: unknown image format", path)
	}
	p, err := newBenchPlot(device, rs)
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(20*vg.Centimeter, 12*vg.Centimeter, format)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, func(w *bufio.Writer) error {
		_, err := wt.WriteTo(w)
		return err
	})
}
