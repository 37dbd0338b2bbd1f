package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/vkattn/vkattn/internal/train"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/vkattn/vkattn"
)

const saturationUsage = `Usage: vkattn saturation [--d 4,16,64,256] [--plot F.png] [--json]

Measures why attention scales its scores by 1/sqrt(d_k). For standard-
normal Q and K (and V and a fixed dO), H=8 heads of L=S=128 positions, at
each d_k with and without the scale, it computes on the device the
attention weights and the gradients of sum(O * dO), and prints per row
(the means over rows):

  max weight   the largest weight: near 1 when the softmax saturates
  entropy      -sum_j P_j ln P_j in nats: ln 128 = 4.85 when flat, 0 one-hot
  |dL/ds|      the norm of the gradient reaching the scores (the softmax's
               input), P * (dO . v_j - dO . O), from the device's weights
               and output
  |dL/dq|      the norm of dQ from the device's backward pass

Unscaled, q . k has variance d_k: the weights go one-hot and the gradients
vanish as d_k grows; scaled, its variance is 1 at every d_k and all four
stay flat. --plot draws the four against d_k, the two scalings side by
side (.png, .svg, .pdf). d_k is at most 256, the kernels' head width.
`

func runSaturation(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("saturation", stderr)
	var dims intList
	dims.vals = []int{4, 16, 64, 256}
	fs.Var(&dims, "d", "the d_k to measure, `D1,D2,...` (each 1 to 256)")
	seed := fs.Uint64("seed", 1, "random `seed` for Q, K, V and dO")
	plotPath := fs.String("plot", "", "draw the measurements against d_k to `FILE.png` (or .svg, .pdf)")
	asJSON := fs.Bool("json", false, "print a JSON array of rows instead of the table")
	var device deviceChoice
	deviceFlag(fs, &device)
	if ok, code := parseFlags(fs, saturationUsage, args, stdout, stderr); !ok {
		return code
	}
	for _, d := range dims.vals {
		if d < 1 || d > 256 {
			return usagef(stderr, "saturation", "--d %d: want 1 to 256: d_k is at most 256, the kernels' head width", d)
		}
	}
	outs := []outputFlag{{"--plot", *plotPath}}
	if *plotPath != "" {
		if _, ok := plotFormat(*plotPath); !ok {
			return usagef(stderr, "saturation", "--plot %s: unknown image format; want a name ending in .png, .svg or .pdf", *plotPath)
		}
	}
	if code := checkOutputPaths("saturation", stderr, outs); code != exitOK {
		return code
	}
	stdout, code := textStreams("saturation", *asJSON, stdout, stderr, outs)
	if code != exitOK {
		return code
	}
	dev, err := vkattn.Open(device.with(vkattn.Config{}))
	if err != nil {
		return failf(stderr, "saturation", "%v", err)
	}
	defer dev.Close()
	var rows []train.SaturationRow
	for _, d := range dims.vals {
		for _, scaled := range []bool{false, true} {
			r, err := train.Saturation(dev, d, scaled, *seed)
			if err != nil {
				return failf(stderr, "saturation", "d_k %d: %v", d, err)
			}
			rows = append(rows, r)
		}
	}
	if *plotPath != "" {
		if err := writeSaturationPlot(*plotPath, rows); err != nil {
			return failf(stderr, "saturation", "--plot: %v", err)
		}
	}
	if err := emitResults(stdout, *asJSON, rows, func() {
		fmt.Fprintf(stdout, "device: %s\nstandard-normal Q, K, V and dO; H=8, L=S=128, d_v=64; means over rows\n", dev.String())
		table := [][]string{{"d_k", "scale", "max weight", "entropy", "|dL/ds|", "|dL/dq|"}}
		for _, r := range rows {
			s := "1"
			if r.Scaled {
				s = "1/sqrt(d_k)"
			}
			table = append(table, []string{strconv.Itoa(r.DK), s, fmt.Sprintf("%.3f", r.MaxWeight), fmt.Sprintf("%.3f", r.Entropy),
				fmt.Sprintf("%.3g", r.ScoreGrad), fmt.Sprintf("%.3g", r.QGrad)})
		}
		printAligned(stdout, table, map[int]bool{1: true})
		if *plotPath != "" {
			fmt.Fprintf(stdout, "wrote %s\n", *plotPath)
		}
	}); err != nil {
		return failf(stderr, "saturation", "%v", err)
	}
	return exitOK
}

// writeSaturationPlot draws the four measurements against d_k, a panel
// each, a line per scaling.
func writeSaturationPlot(path string, rows []train.SaturationRow) error {
	format, _ := plotFormat(path)
	panels := []struct {
		title string
		y     func(train.SaturationRow) float64
		log   bool
	}{
		{"mean largest weight", func(r train.SaturationRow) float64 { return r.MaxWeight }, false},
		{"mean entropy (nats)", func(r train.SaturationRow) float64 { return r.Entropy }, false},
		{"mean |dL/ds| (scores)", func(r train.SaturationRow) float64 { return r.ScoreGrad }, true},
		{"mean |dL/dq|", func(r train.SaturationRow) float64 { return r.QGrad }, true},
	}
	var plots []*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "d_k"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		if pn.log {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		var args []any
		for _, scaled := range []bool{false, true} {
			var xy plotter.XYs
			for _, r := range rows {
				if y := pn.y(r); r.Scaled == scaled && (!pn.log || y > 0) {
					xy = append(xy, plotter.XY{X: float64(r.DK), Y: y})
				}
			}
			label := "unscaled"
			if scaled {
				label = "1/sqrt(d_k)"
			}
			args = append(args, label, xy)
		}
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return err
		}
		p.Add(plotter.NewGrid())
		plots = append(plots, p)
	}
	c, err := draw.NewFormattedCanvas(40*vg.Centimeter, 11*vg.Centimeter, format)
	if err != nil {
		return err
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, draw.New(c))
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	return writeFileAtomic(path, func(w *bufio.Writer) error {
		_, err := c.WriteTo(w)
		return err
	})
}
