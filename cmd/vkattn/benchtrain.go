package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/tune"
)

// trainShape is --mha-train B,L,E,H: an MHA layer's training step.
type trainShape struct{ B, L, E, H int }

// defaultTrainShape is the mha-train suite's: a small transformer
// block's self-attention.
var defaultTrainShape = trainShape{B: 4, L: 128, E: 256, H: 8}

func (s *trainShape) String() string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("%d,%d,%d,%d", s.B, s.L, s.E, s.H)
}

func (s *trainShape) Set(v string) error {
	fields := strings.Split(v, ",")
	if len(fields) != 4 {
		return fmt.Errorf("%q: want B,L,E,H (4 integers)", v)
	}
	var n [4]int
	for i, f := range fields {
		x, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || x < 1 {
			return fmt.Errorf("%q: %q is not a positive integer (want B,L,E,H)", v, f)
		}
		n[i] = x
	}
	if n[2]%n[3] != 0 {
		return fmt.Errorf("%q: %d heads do not divide E = %d", v, n[3], n[2])
	}
	*s = trainShape{B: n[0], L: n[1], E: n[2], H: n[3]}
	return nil
}

// trainResult is one training step's measurements: the row of the table,
// the object of --json.
type trainResult struct {
	Layer        string     `json:"layer"`
	B            int        `json:"b"`
	L            int        `json:"l"`
	E            int        `json:"e"`
	H            int        `json:"h"`
	Device       string     `json:"device"`
	Plan         string     `json:"plan"` // the forward's
	Reps         int        `json:"reps"`
	ColdWallNS   int64      `json:"cold_wall_ns"`
	GPU          tune.Stats `json:"gpu_ns"` // forward + backward; all 0 without device timestamps
	ForwardGPU   tune.Stats `json:"forward_gpu_ns"`
	BackwardGPU  tune.Stats `json:"backward_gpu_ns"`
	Wall         tune.Stats `json:"wall_ns"`
	Timing       string     `json:"timing"` // "gpu" or "wall": the median the rate divides by
	FLOPs        float64    `json:"flops"`
	GFLOPS       float64    `json:"gflops"`
	Allocs       int        `json:"allocs_per_step"`
	Submits      float64    `json:"submits_per_step"`
	Waits        float64    `json:"waits_per_step"`
	StagingBytes float64    `json:"staging_bytes_per_step"`
}

// trainFLOPs counts a training step of a layer planned as p: the forward
// once, then the backward, twice each dense layer's (dX and dW) and
// FlashAttention's 2.5 times the attention's (the recomputed forward
// inside the backward pass is not counted, as for bench --backward).
func trainFLOPs(p nn.MHAPlan) float64 {
	dense := p.OutProj.FLOPs()
	for _, l := range p.Projections {
		dense += l.FLOPs()
	}
	return 3*dense + 3.5*p.Attention.Dims.FLOPs()
}

// trainStep is one training step of prepared calls: the forward, then the
// backward; Run returns their device times summed (0 where either has
// none) and keeps each.
type trainStep struct {
	forward  *nn.MHACall
	backward *nn.MHAGradCall
	fwd, bwd []time.Duration
}

func (s *trainStep) Run(ctx context.Context) (time.Duration, error) {
	f, err := s.forward.Run(ctx)
	if err != nil {
		return 0, err
	}
	b, err := s.backward.Run(ctx)
	if err != nil {
		return 0, err
	}
	s.fwd, s.bwd = append(s.fwd, f), append(s.bwd, b)
	if f == 0 || b == 0 {
		return 0, nil
	}
	return f + b, nil
}

// benchTrain times reps training steps of a self-attention MHA layer of
// shape s (packed in_proj with biases, weights drawn as PyTorch
// initialises them, random x and dY from seed) after one cold step; clock
// follows the steps and tick is called after each.
func benchTrain(ctx context.Context, dev *vkattn.Device, s trainShape, reps int, seed uint64, clock *tune.Clock, tick func()) (trainResult, error) {
	res := trainResult{Layer: "nn.MHA self-attention, packed in_proj, biases", B: s.B, L: s.L, E: s.E, H: s.H, Device: dev.String(), Reps: reps}
	r := rand.New(rand.NewPCG(seed, 0x6d6861)) // "mha"
	uniform := func(n int, bound float64) []float32 {
		x := random.Uniform(r, n)
		for i := range x {
			x[i] *= float32(bound)
		}
		return x
	}
	e := s.E
	// PyTorch: xavier_uniform_ for in_proj_weight, nn.Linear's bound
	// 1/sqrt(E) for out_proj; its biases start at zero.
	w := &nn.MHAWeights{DModel: e, KDim: e, VDim: e,
		InProjWeight: uniform(3*e*e, math.Sqrt(6/float64(4*e))), InProjBias: make([]float32, 3*e),
		OutProjWeight: uniform(e*e, 1/math.Sqrt(float64(e))), OutProjBias: make([]float32, e)}
	layer, err := nn.NewMHA(dev, w)
	if err != nil {
		return res, err
	}
	defer layer.Close()
	shape := []int{s.B, s.L, e}
	x, err := dev.Upload(shape, uniform(s.B*s.L*e, 1))
	if err != nil {
		return res, err
	}
	defer x.Close()
	dY, err := dev.Upload(shape, uniform(s.B*s.L*e, 1))
	if err != nil {
		return res, err
	}
	defer dY.Close()
	opts := nn.MHAOptions{Heads: s.H}
	step := &trainStep{}
	if step.forward, err = layer.Prepare(x, nil, nil, opts); err != nil {
		return res, err
	}
	defer step.forward.Close()
	if step.backward, err = layer.PrepareBackward(x, nil, nil, dY, opts); err != nil {
		return res, err
	}
	defer step.backward.Close()
	plan := step.forward.Output().Plan
	res.Plan, res.FLOPs = plan.String(), trainFLOPs(plan)

	start := time.Now()
	clock.Begin(true)
	_, err = step.Run(ctx)
	res.ColdWallNS = int64(time.Since(start))
	clock.Lap()
	tick()
	if err != nil {
		return res, err
	}
	step.fwd, step.bwd = nil, nil
	before := dev.Stats()
	tm, err := tune.TimeRuns(ctx, step, reps, func() { clock.Lap(); tick() })
	clock.Idle()
	if err != nil {
		return res, err
	}
	cost := dev.Stats().Since(before)
	res.GPU, res.Wall, res.Timing = tm.GPU, tm.Wall, tm.Timing
	if tm.Timing == "gpu" {
		res.ForwardGPU, res.BackwardGPU = tune.StatsOf(step.fwd), tune.StatsOf(step.bwd)
	}
	if tm.Median > 0 {
		res.GFLOPS = res.FLOPs / tm.Median.Seconds() / 1e9
	}
	res.Allocs = cost.Allocations / reps
	res.Submits, res.Waits = float64(cost.Submits)/float64(reps), float64(cost.Waits)/float64(reps)
	res.StagingBytes = float64(cost.StagingBytes) / float64(reps)
	return res, nil
}

// runTrainBench is bench --suite mha-train or --mha-train: one row.
func runTrainBench(f *benchFlags, s trainShape, stdout, stderr io.Writer) int {
	path, err := vkattn.ParseLoadPath(f.loadPath)
	if err != nil {
		return usagef(stderr, "bench", "--load-path %q: want auto, texel or storage", f.loadPath)
	}
	dev, err := vkattn.Open(f.device.with(vkattn.Config{LoadPath: path}))
	if err != nil {
		return failf(stderr, "bench", "%v", err)
	}
	defer dev.Close()
	prog := newBenchProgress(stderr, f.quiet, 1+f.reps)
	clock := &tune.Clock{}
	ctx, stop := interruptible("bench", func() string {
		prog.clear()
		return clock.Estimate()
	})
	defer stop()
	prog.describe("mha-train " + s.String())
	res, err := benchTrain(ctx, dev, s, f.reps, f.seed, clock, prog.add)
	prog.finish()
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return failf(stderr, "bench", "interrupted")
		}
		return failf(stderr, "bench", "mha-train %s: %v", s.String(), err)
	}
	if err := emitResults(stdout, f.json, []trainResult{res}, func() { printTrainTable(stdout, res) }); err != nil {
		return failf(stderr, "bench", "%v", err)
	}
	return exitOK
}

// printTrainTable writes the step's row and what it counts.
func printTrainTable(w io.Writer, r trainResult) {
	fmt.Fprintf(w, "device: %s\nlayer: %s\n", r.Device, r.Layer)
	gpu, fwd, bwd := "n/a", "n/a", "n/a"
	if r.Timing == "gpu" {
		gpu, fwd, bwd = durTriple(r.GPU), durString(time.Duration(r.ForwardGPU.Median)), durString(time.Duration(r.BackwardGPU.Median))
	}
	rows := [][]string{{"B", "L", "E", "H", "cold", "forward", "backward", "step gpu min/med/max", "step wall min/med/max", "GFLOP/s", "submits"},
		{strconv.Itoa(r.B), strconv.Itoa(r.L), strconv.Itoa(r.E), strconv.Itoa(r.H), durString(time.Duration(r.ColdWallNS)), fwd, bwd, gpu, durTriple(r.Wall),
			rate(r.GFLOPS), strconv.FormatFloat(r.Submits, 'g', 3, 64)}}
	printAligned(w, rows, nil)
	fmt.Fprintf(w, "%d timed steps after one cold step (wall time, includes compiling the variants); forward and backward are median GPU times.\n", r.Reps)
	fmt.Fprintln(w, "A step: the layer's forward (MHA.Prepare's call) then its backward (MHA.PrepareBackward's: the projections and attention again,")
	fmt.Fprintln(w, "the heads' backward and every dense layer's gradients), each replayed. GFLOP/s: 3 x the dense layers' 2*rows*in*out")
	fmt.Fprintln(w, "plus 3.5 x the attention's 4*B*H*L*S*d, over the median step.")
}
