package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/train"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/internal/verify"
	"github.com/vkattn/vkattn/reference"
)

const demoUsage = `Usage: vkattn demo [--device N]

Prints the worked examples of SEMANTICS.md §18 (seeds 000 and 003) computed on the
device: inputs, the attention weights A (asked for with WantWeights) and the
output O, each next to the values SEMANTICS.md gives. Then runs one larger random
problem (B=2, H=4, L=S=128, d=64, fixed seed) and prints its largest
difference from the float64 reference, the GPU time of its first call
(which compiles the kernel on lavapipe) and that of the steady state.
Last, trains attention to reverse sequences of 8 tokens on the device
(Device.AttentionBackward and Adam: queries and keys learned per
position, new random tokens every step) and prints its loss falling and
the alignment it learned.

The first run of each kernel variant compiles it (seconds on lavapipe);
later runs load it from the pipeline cache.

Example:
  vkattn demo
  vkattn demo --device 1
`

// demoExample is one worked example of SEMANTICS.md §18.
type demoExample struct {
	title, spec string // spec: what SEMANTICS.md §18 says the result is
	q, k, v     [][]float32
	mask        []float32 // additive, over the S keys; nil if none
	note        string
}

// The inputs of SEMANTICS.md §18's two seeds, which the variations below
// change one part of.
var (
	seed000Q = [][]float32{{1, 0}}
	seed000K = [][]float32{{1, 0}, {0, 1}, {1, 1}}
	seed000V = [][]float32{{2, 0}, {0, 4}, {2, 2}}
	seed003Q = [][]float32{{1, 0}, {0, 1}, {1, 1}}
	seed003K = [][]float32{{1, 1}, {0, 1}, {1, 2}}
	seed003V = [][]float32{{1, 0}, {1, 2}, {2, 2}}
)

var demoExamples = []demoExample{
	{
		title: "seed 000: B=L=1, S=3, d_k=d_v=2",
		q:     seed000Q,
		k:     seed000K,
		v:     seed000V,
		note:  "Q K^T = [1 0 1]; scaled by 1/sqrt(2): [0.7071 0 0.7071]",
		spec:  "A ~ [0.4011 0.1978 0.4011]   O ~ [1.6044 1.5933]",
	},
	{
		title: "seed 000 with M = [0 0 -inf]",
		q:     seed000Q,
		k:     seed000K,
		v:     seed000V,
		mask:  []float32{0, 0, float32(math.Inf(-1))},
		spec:  "A ~ [0.6698 0.3302 0]   O ~ [1.3395 1.3210]",
	},
	{
		title: "weights (0.5, 0.25, 0.25) over V = (2,0),(0,4),(2,2)",
		q:     [][]float32{{0, 0}},
		k:     seed000K,
		v:     seed000V,
		mask:  []float32{float32(math.Ln2), 0, 0},
		note:  "a zero query scores every key 0; the mask [ln 2, 0, 0] makes exp 2:1:1",
		spec:  "O = (1.5, 1.5)",
	},
	{
		title: "seed 003: self-attention, T=3, widths 2",
		q:     seed003Q,
		k:     seed003K,
		v:     seed003V,
		note:  "X = [[1 0],[0 1],[1 1]], W_Q = I, W_K = [[1 1],[0 1]], W_V = [[1 0],[1 2]]; Q K^T = [[1 0 1],[1 1 2],[2 1 3]]",
		spec: "A = [[0.401112 0.197776 0.401112] [0.248255 0.248255 0.503490] [0.283995 0.140029 0.575975]]\n" +
			"O = [[1.401112 1.197776] [1.503490 1.503490] [1.575975 1.432009]]",
	},
	{
		title: "seed 003 with zero W_V",
		q:     seed003Q,
		k:     seed003K,
		v:     [][]float32{{0, 0}, {0, 0}, {0, 0}},
		spec:  "O all zeros, A unchanged",
	},
	{
		title: "seed 003 with V + [2,-1] per row",
		q:     seed003Q,
		k:     seed003K,
		v:     [][]float32{{3, -1}, {3, 1}, {4, 1}},
		spec:  "O + [2,-1]; first row [3.401112092679786, 0.1977758146404283]",
	},
	{
		title: "seed 003 with third query [0,0]",
		q:     [][]float32{{1, 0}, {0, 1}, {0, 0}},
		k:     seed003K,
		v:     seed003V,
		spec:  "third row: weights [1/3 1/3 1/3], output [4/3 4/3]",
	},
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", stderr)
	var device deviceChoice
	deviceFlag(fs, &device)
	if ok, code := parseFlags(fs, demoUsage, args, stdout, stderr); !ok {
		return code
	}
	dev, err := vkattn.Open(device.with(vkattn.Config{}))
	if err != nil {
		return failf(stderr, "demo", "%v", err)
	}
	defer dev.Close()
	fmt.Fprintf(stdout, "device: %v\n", dev)
	for _, ex := range demoExamples {
		if err := demoOne(stdout, dev, ex); err != nil {
			return failf(stderr, "demo", "%s: %v", ex.title, err)
		}
	}
	if err := demoRandom(stdout, dev); err != nil {
		return failf(stderr, "demo", "random problem: %v", err)
	}
	if err := demoTraining(stdout, dev); err != nil {
		return failf(stderr, "demo", "training: %v", err)
	}
	return exitOK
}

// demoTraining trains the reversal task and prints its progress.
func demoTraining(w io.Writer, dev *vkattn.Device) error {
	cfg := train.DefaultConfig
	fmt.Fprintf(w, "\ntraining: attention learns to reverse %d-token sequences (queries and keys per position, Adam, %d sequences a step)\n", cfg.N, cfg.Batch)
	res, err := train.Reverse(dev, cfg, func(step int, loss float64) {
		if step%25 == 0 || step == cfg.Steps-1 {
			fmt.Fprintf(w, "  step %3d: mean squared error %.3g\n", step, loss)
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  query position t attends most to key position %v (the mirror, N-1-t, is the task)\n", res.Alignment)
	return nil
}

func demoOne(w io.Writer, dev *vkattn.Device, ex demoExample) error {
	fmt.Fprintf(w, "\n== %s\n", ex.title)
	if ex.note != "" {
		fmt.Fprintf(w, "   %s\n", ex.note)
	}
	p := &problem{
		q:    matrix(ex.q),
		k:    matrix(ex.k),
		v:    matrix(ex.v),
		opts: vkattn.Options{WantWeights: true},
	}
	if ex.mask != nil {
		p.opts.Mask = &vkattn.Mask{Shape: vkattn.MaskShape{1, 1, 1, len(ex.mask)}, Values: ex.mask}
	}
	fmt.Fprintf(w, "Q = %s\nK = %s\nV = %s\n", formatRows(p.q.F32, len(ex.q[0]), false), formatRows(p.k.F32, len(ex.k[0]), false), formatRows(p.v.F32, len(ex.v[0]), false))
	if ex.mask != nil {
		fmt.Fprintf(w, "M = %s\n", formatRows(ex.mask, len(ex.mask), false))
	}
	res, err := attend(dev, p)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "GPU:  A = %s\n      O = %s\n", formatRows(res.Weights, len(ex.k), true), formatRows(res.O, len(ex.v[0]), true))
	fmt.Fprintf(w, "spec: %s\n", strings.ReplaceAll(ex.spec, "\n", "\n      "))
	return nil
}

// steadyGPUTime is the median device time of n runs of p's call, prepared
// once (0 without timestamps).
func steadyGPUTime(dev *vkattn.Device, p *problem, n int) (time.Duration, error) {
	return verify.MedianGPUTime(dev, *p.q.input(), *p.k.input(), *p.v.input(), func(q, k, v *vkattn.Tensor) (*vkattn.Call, error) {
		return dev.Prepare(q, k, v, p.opts)
	}, n)
}

// demoRandom runs a larger seeded problem and compares it with the reference.
func demoRandom(w io.Writer, dev *vkattn.Device) error {
	const b, h, l, s, d = 2, 4, 128, 128, 64
	rng := rand.New(rand.NewPCG(2024, 1))
	p := &problem{q: normalArray(rng, b, h, l, d), k: normalArray(rng, b, h, s, d), v: normalArray(rng, b, h, s, d)}
	p.q4, p.k4, p.v4 = [4]int{b, h, l, d}, [4]int{b, h, s, d}, [4]int{b, h, s, d}
	fmt.Fprintf(w, "\n== random problem B=%d H=%d L=S=%d d=%d (standard normal, fixed seed)\n", b, h, l, d)
	res, err := attend(dev, p)
	if err != nil {
		return err
	}
	ref, err := reference.Attention(p.q.F32, p.q4, p.k.F32, p.k4, p.v.F32, p.v4, p.opts)
	if err != nil {
		return err
	}
	chk := &verdict.Check{}
	chk.Add("O", res.O, ref.O)
	fmt.Fprintf(w, "plan: %v\n", res.Plan)
	// The first call of a kernel variant compiles it (lavapipe compiles
	// at its first dispatch): that is not the kernel's speed.
	steady, err := steadyGPUTime(dev, p, 3)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "first call (compiling its kernel included): %s\n", gpuTimeString(res.GPUTime, res.Plan.Dims.FLOPs()))
	fmt.Fprintf(w, "GPU time (the median of 3 more calls): %s\n", gpuTimeString(steady, res.Plan.Dims.FLOPs()))
	fmt.Fprintln(w, chk.String())
	if !chk.OK() {
		return fmt.Errorf("the GPU result differs from the reference")
	}
	return nil
}

func matrix(rows [][]float32) *npyArray {
	a := &npyArray{Shape: []int{len(rows), len(rows[0])}}
	for _, r := range rows {
		a.F32 = append(a.F32, r...)
	}
	return a
}

// formatRows prints row-major values as [[a b] [c d]], or [a b] for one row;
// inputs in shortest form, results with 6 decimals as in SEMANTICS.md §18.
func formatRows(x []float32, width int, result bool) string {
	var rows []string
	for i := 0; i < len(x); i += width {
		var vals []string
		for _, v := range x[i:min(i+width, len(x))] {
			if result {
				vals = append(vals, strconv.FormatFloat(float64(v), 'f', 6, 32))
			} else {
				vals = append(vals, strconv.FormatFloat(float64(v), 'g', -1, 32))
			}
		}
		rows = append(rows, "["+strings.Join(vals, " ")+"]")
	}
	if len(rows) == 1 {
		return rows[0]
	}
	return "[" + strings.Join(rows, " ") + "]"
}

// normalArray is an array of standard normal values of the given shape.
func normalArray(rng *rand.Rand, shape ...int) *npyArray {
	n := 1
	for _, x := range shape {
		n *= x
	}
	return &npyArray{Shape: shape, F32: random.Normal(rng, n)}
}
