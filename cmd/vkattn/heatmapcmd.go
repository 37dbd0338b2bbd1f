package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/vkattn/vkattn/heatmap"
)

const heatmapUsage = `Usage: vkattn heatmap --weights W.npy -o HEAT.png [flags]

Draws attention weights as heat maps: one panel per head in a grid, query
positions down the side (query 0 at the top), key positions along the
bottom, and a colour bar with its scale. The colour map is Kindlmann's
(Moreland's perceptual version): black is 0, white the top of the scale,
which is the largest weight drawn unless --max sets it. A masked key has
weight 0 and is black.

W.npy holds weights of shape (L,S), (H,L,S) or (B,H,L,S), as
'vkattn run --weights W.npy' writes them. The picture's format follows the
extension of -o: .png, .svg or .pdf.

Weights mislead where values are small: a large weight on a near-zero
value adds nothing to the output. --contribution V.npy draws
a_ij * ||v_j|| instead, what key j actually adds to query i's output (V as
given to run: (S,d_v), (H_kv,S,d_v) or (B,H_kv,S,d_v)).

Tokens label the axes instead of positions: a comma-separated list, or
@FILE for a text file with one token per line (at most 16 MiB).

Examples:
  vkattn run -q q.npy -k k.npy -v v.npy --weights w.npy
  vkattn heatmap --weights w.npy -o heat.png
  vkattn heatmap --weights w.npy --heads 0,3 --tokens-q "the,cat,sat" --tokens-k @keys.txt -o heat.svg
  vkattn heatmap --weights w.npy --contribution v.npy -o contribution.pdf
  vkattn run -q q.npy -k k.npy -v v.npy --heatmap heat.png   # in one go
`

// heatmapFlags are heatmap's command line.
type heatmapFlags struct {
	weights, out     string
	batch            int
	heads            intList
	tokensQ, tokensK string
	contribution     string
	max              optFloat
	title            string
}

func runHeatmap(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heatmap", stderr)
	var f heatmapFlags
	fs.StringVar(&f.weights, "weights", "", "attention weights `W.npy`, (L,S), (H,L,S) or (B,H,L,S)")
	fs.StringVar(&f.out, "o", "", "write the picture to `FILE` (.png, .svg or .pdf)")
	fs.IntVar(&f.batch, "batch", 0, "the batch item `b` to draw")
	fs.Var(&f.heads, "heads", "heads to draw, `N,N,...` (default every head)")
	fs.StringVar(&f.tokensQ, "tokens-q", "", "query labels: `a,b,c` or @FILE (one per line)")
	fs.StringVar(&f.tokensK, "tokens-k", "", "key labels: `a,b,c` or @FILE (one per line)")
	fs.StringVar(&f.contribution, "contribution", "", "values `V.npy`: draw a_ij * ||v_j|| instead of a_ij")
	fs.Var(&f.max, "max", "top of the colour scale `X` (default the largest value drawn)")
	fs.StringVar(&f.title, "title", "", "the picture's `title`")
	if ok, code := parseFlags(fs, heatmapUsage, args, stdout, stderr); !ok {
		return code
	}
	if f.weights == "" || f.out == "" {
		return usagef(stderr, "heatmap", "--weights and -o are required")
	}
	if _, err := heatmap.Format(f.out); err != nil {
		return usagef(stderr, "heatmap", "-o %s: want a name ending in .png, .svg or .pdf", f.out)
	}
	if f.batch < 0 {
		return usagef(stderr, "heatmap", "--batch %d: want a batch item >= 0", f.batch)
	}
	for _, h := range f.heads.vals {
		if h < 0 {
			return usagef(stderr, "heatmap", "--heads %s: want heads >= 0", f.heads.String())
		}
	}
	if f.max.set && f.max.v <= 0 {
		return usagef(stderr, "heatmap", "--max %v: want a positive number", f.max.v)
	}
	if code := checkOutputPaths("heatmap", stderr, []outputFlag{{"-o", f.out}}); code != exitOK {
		return code
	}
	stdout, code := textStreams("heatmap", false, stdout, stderr, []outputFlag{{"-o", f.out}})
	if code != exitOK {
		return code
	}
	a, err := readFloatInput("weights", f.weights)
	if err != nil {
		return failf(stderr, "heatmap", "%v", err)
	}
	w, err := heatmap.NewWeights(a.Shape, a.F32)
	if err != nil {
		return failf(stderr, "heatmap", "--weights %s: %v", f.weights, err)
	}
	o := heatmap.Options{Batch: f.batch, Title: f.title}
	if f.heads.set {
		o.Heads = f.heads.vals
	}
	if f.max.set {
		o.Max = f.max.v
	}
	if o.TokensQ, err = readTokens(f.tokensQ); err != nil {
		return failf(stderr, "heatmap", "--tokens-q: %v", err)
	}
	if o.TokensK, err = readTokens(f.tokensK); err != nil {
		return failf(stderr, "heatmap", "--tokens-k: %v", err)
	}
	if f.contribution != "" {
		v, err := readFloatInput("V", f.contribution)
		if err != nil {
			return failf(stderr, "heatmap", "%v", err)
		}
		if w, err = heatmap.Contribution(w, v.Shape, v.F32); err != nil {
			return failf(stderr, "heatmap", "--contribution %s: %v", f.contribution, err)
		}
		if o.Title == "" {
			o.Title = "value contribution a_ij * ||v_j||"
		}
		o.Label = "a_ij * ||v_j||"
	}
	p, top, err := stageHeatmap(f.out, w, o)
	if err != nil {
		return failf(stderr, "heatmap", "%v", err)
	}
	if err := p.commit(); err != nil {
		return failf(stderr, "heatmap", "%v", err)
	}
	fmt.Fprintf(stdout, "wrote %s (%d panel(s), colour scale 0 to %.4g)\n", f.out, panelCount(w, o), top)
	return exitOK
}

// panelCount is how many heads o draws of w.
func panelCount(w heatmap.Weights, o heatmap.Options) int {
	if o.Heads != nil {
		return len(o.Heads)
	}
	return w.Shape[1]
}

// stageHeatmap draws w into a temporary file beside path's target (see
// stageFile) and returns it with the top of the colour scale it used.
func stageHeatmap(path string, w heatmap.Weights, o heatmap.Options) (*pendingFile, float64, error) {
	format, err := heatmap.Format(path)
	if err != nil {
		return nil, 0, err
	}
	pic, err := heatmap.New(w, o)
	if err != nil {
		return nil, 0, err
	}
	p, err := stageFile(path, func(bw *bufio.Writer) error { return pic.Write(bw, format) })
	return p, pic.Max, err
}

// readTokens parses a tokens flag: "" is none, "@FILE" one token per line
// of FILE, anything else a comma-separated list.
func readTokens(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	if name, ok := strings.CutPrefix(s, "@"); ok {
		data, err := readLimited(name, "token file", maxTokenFileBytes)
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimSuffix(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n"), "\n"), nil
	}
	return strings.Split(s, ","), nil
}
