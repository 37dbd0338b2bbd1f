package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/internal/verify"
)

const gradUsage = `Usage: vkattn grad -q Q.npy -k K.npy -v V.npy --dout DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy [flags]

Computes on the device the gradients of L = sum(O * dO) for
O = attention(Q, K, V) as vkattn run computes it (SEMANTICS.md §10): the
forward (O and its log-sum-exp), then FlashAttention-2's backward, which
recomputes the probabilities from the log-sum-exp (nothing L x S is
stored) and sums in a fixed order (the same bits run to run).

Inputs as for run: Q (B,H,L,d_k), K (B,H_kv,S,d_k), V (B,H_kv,S,d_v), rank
2 to 4, and DO with O's shape (Q's, last axis d_v). Every mask, length,
causal and score-variant flag of run applies, as do --scale, --dtype and
--kv-dtype f32, f16 or bf16 (the gradients are of the values as stored;
they are float32). The backward reads float K and V: --kv-dtype q8_0, q4_0 or
iq4_nl is a usage error.
Under grouped-query attention dK and dV sum every query head of a group.
Rows that are padding or see no key have output 0 and add nothing.

` + outputRule + `--json, whose summary cannot move, is refused with such a stream.
Outputs (float32 .npy, the shapes of Q, K and V as given):
  --dq DQ.npy  --dk DK.npy  --dv DV.npy
  --dsinks DS.npy      with --sinks: the gradient of each head's sink, (H,)

--check compares with the float64 reference (reference.AttentionBackward)
and exits 1, writing nothing, if any |GPU - reference| exceeds
1e-4 * max(1, max |reference|) of its tensor.

Example:
  vkattn grad -q q.npy -k k.npy -v v.npy --dout do.npy --causal bottom-right \
    --dq dq.npy --dk dk.npy --dv dv.npy --check
`

// gradFlags are grad's command line: run's problem flags and the
// gradients' files.
type gradFlags struct {
	runFlags
	dout, dq, dk, dv, dsinks string
}

// gradSummary is what grad reports (--json).
type gradSummary struct {
	Device string               `json:"device"`
	Dims   vkattn.Dims          `json:"dims"`
	DTypes [3]string            `json:"dtypes"`
	Plan   string               `json:"plan"` // the forward's
	GPUNS  int64                `json:"gpu_ns"`
	Grads  map[string]arrayJSON `json:"grads"` // dQ, dK, dV (and dSinks)
	Check  *verdict.GradCheck   `json:"check,omitempty"`
}

func runGrad(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("grad", stderr)
	var f gradFlags
	f.problemFlags(fs)
	fs.StringVar(&f.dout, "dout", "", "the gradient of the loss with respect to O, `DO.npy` (O's shape)")
	fs.StringVar(&f.dq, "dq", "", "write dL/dQ to `DQ.npy` (Q's shape)")
	fs.StringVar(&f.dk, "dk", "", "write dL/dK to `DK.npy` (K's shape)")
	fs.StringVar(&f.dv, "dv", "", "write dL/dV to `DV.npy` (V's shape)")
	fs.StringVar(&f.dsinks, "dsinks", "", "write dL/dsinks to `DS.npy` (H values; needs --sinks)")
	fs.BoolVar(&f.check, "check", false, "compare with the float64 reference; exit 1 if it disagrees")
	fs.BoolVar(&f.json, "json", false, "print a machine-readable JSON summary")
	fs.Lookup("kv-dtype").Usage = "store K and V as `T`: f32, f16 or bf16 (not q8_0, q4_0 or iq4_nl: the backward reads float K and V), overriding --dtype for them"
	if ok, code := parseFlags(fs, gradUsage, args, stdout, stderr); !ok {
		return code
	}
	if f.missing() || f.dout == "" {
		return usagef(stderr, "grad", "-q, -k, -v and --dout are required")
	}
	if f.dsinks != "" && f.sinks == "" {
		return usagef(stderr, "grad", "--dsinks needs --sinks")
	}
	causal, err := f.checkProblemFlags()
	if err != nil {
		return usagef(stderr, "grad", "%v", err)
	}
	// Refused here, before any input is read, rather than by the planner
	// once the forward has run.
	if ts, _ := f.types([3]vkattn.DType{}); ts[1].Quantized() {
		return usagef(stderr, "grad", "--kv-dtype %v: the backward reads float K and V; say f32, f16 or bf16", ts[1])
	}
	outs := []outputFlag{{"--dq", f.dq}, {"--dk", f.dk}, {"--dv", f.dv}, {"--dsinks", f.dsinks}}
	if code := checkOutputPaths("grad", stderr, outs); code != exitOK {
		return code
	}
	stdout, code := textStreams("grad", f.json, stdout, stderr, outs)
	if code != exitOK {
		return code
	}
	p, err := loadProblem(&f.runFlags, causal)
	if err != nil {
		return failf(stderr, "grad", "%v", err)
	}
	dO, err := readFloatInput("--dout", f.dout)
	if err != nil {
		return failf(stderr, "grad", "%v", err)
	}
	oShape, _, _ := golden.OutputShapes(p.q.Shape, p.dims.S, p.dims.DV)
	if !slices.Equal(dO.Shape, oShape) {
		return failf(stderr, "grad", "--dout %s has shape %v; want O's %v: %v", f.dout, dO.Shape, oShape, vkattn.ErrShape)
	}

	dev, err := vkattn.Open(f.device.with(vkattn.Config{}))
	if err != nil {
		return failf(stderr, "grad", "%v", err)
	}
	defer dev.Close()
	g, err := verify.AttentionGradients(dev, *p.q.input(), *p.k.input(), *p.v.input(), *dO.input(), [3][4]int{p.q4, p.k4, p.v4}, p.opts, f.check)
	if err != nil {
		return failf(stderr, "grad", "%v", err)
	}
	chk := g.Check
	if chk != nil && !chk.Pass {
		return failf(stderr, "grad", "check failed: the GPU gradients differ from the float64 reference (%s, %.3g times the bound); no output written", chk.Worst(), float64(chk.Ratio))
	}
	var files []output
	for i, path := range []string{f.dq, f.dk, f.dv, f.dsinks} {
		if path != "" && i < len(g.Grads) {
			x := g.Grads[i]
			files = append(files, output{name: x.Name, path: path, shape: x.Shape, data: x.Data})
		}
	}
	if err := writeNPYFiles(files); err != nil {
		return failf(stderr, "grad", "%v", err)
	}
	if f.json {
		s := gradSummary{Device: dev.String(), Dims: p.dims, DTypes: [3]string{p.q.Store.String(), p.k.Store.String(), p.v.Store.String()},
			Plan: g.Plan.String(), GPUNS: int64(g.GPUTime), Check: chk}
		s.Grads = map[string]arrayJSON{}
		for _, x := range g.Grads {
			s.Grads[x.Name] = arrayJSON{Shape: x.Shape, First: first(x.Data, 8)}
		}
		for _, o := range files {
			a := s.Grads[o.name]
			a.File = o.path
			s.Grads[o.name] = a
		}
		if err := printJSON(stdout, s); err != nil {
			return failf(stderr, "grad", "%v", err)
		}
		return exitOK
	}
	for _, x := range g.Grads[:3] {
		fmt.Fprintf(stdout, "%s %s: %s\n", x.Name, shapeString(x.Shape), firstValues(x.Data, 8))
	}
	if len(g.Grads) > 3 {
		fmt.Fprintf(stdout, "dSinks: %v\n", g.Grads[3].Data)
	}
	gpu := "not measured (the device has no compute-queue timestamps)"
	if g.GPUTime > 0 {
		gpu = g.GPUTime.String()
	}
	fmt.Fprintf(stdout, "forward plan: %v\nGPU time (forward and backward): %s\n", g.Plan, gpu)
	for _, o := range files {
		fmt.Fprintf(stdout, "wrote %s %s to %s\n", o.name, shapeString(o.shape), o.path)
	}
	if chk != nil {
		fmt.Fprintf(stdout, "check vs float64 reference: max abs err %.3g, worst %.3g times the bound 1e-4 * max(1, max|ref|): ok\n", float64(chk.MaxAbs), float64(chk.Ratio))
	}
	return exitOK
}
