package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/internal/verify"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
)

const additiveUsage = `Usage: vkattn additive -q Q.npy -k K.npy -v V.npy --params P.npz [-o OUT.npy] [flags]

Computes additive (Bahdanau) attention on a Vulkan device:
  e_{t,j} = tanh(q_t W_q + k_j W_k + b) . w_a + masks,   O = softmax_j(e) V
Each query and key is projected once; the attention kernel then scores
every pair with the same online softmax and masks as 'vkattn run'.
Additive scores have no scale.

Inputs are .npy files (float32; float16 and float64 are converted), all
of rank 3 or all of rank 2 (one sequence, without B):
  -q Q.npy   queries (B,L,d_q)     -k K.npy   keys (B,S,d_k)
  -v V.npy   values (B,S,d_v)

--params reads, from .npz or .safetensors, at top level:
  W_q (d_q,d_a), W_k (d_k,d_a)   (in, out): e uses q W_q, not PyTorch's (out, in)
  b (d_a)                         optional, zero without it
  w_a (d_a) or (d_a,1)

Masks combine and broadcast to (B,1,L,S) (one head) from the left; a 3-D
(B,L,S) mask is per batch item:
  --mask M.npy             float values are added to the scores (-inf blocks);
                           a bool mask needs --mask-means allow|block
  --causal top-left        query t sees keys j <= t
  --causal bottom-right    query t sees keys j <= t + S - L
  --key-lengths 3,5        keys past the length of batch item b are masked
  --query-lengths 2,3      query rows past it give zeros
A row whose every key is masked has output 0 and log-sum-exp -inf.

` + outputRule + `Outputs:
  -o OUT.npy       O, (B,L,d_v)
  --lse LSE.npy    natural log-sum-exp of each row's scores, (B,L)
  --weights W.npy  attention weights, (B,L,S)
Without -o a short summary is printed instead.

Gradients (training): --dout DO.npy, the gradient of the loss with
respect to O (O's shape), and --grads G.npz write the gradients of
sum(O * DO) as one .npz: q, k, v (their shapes as given) and W_q, W_k,
b (with a bias), w_a (d_a), named as in the params file. The whole
backward pass runs on the device (Additive.Backward: the projections,
the attention's forward and backward, the projections' gradients), one
submission; the gradients are read back to be written.

--check compares with the float64 reference (reference.AdditiveAttention)
and exits 1, writing nothing, if any |GPU - reference| > 1e-4 * max(1, |reference|);
with --grads it also compares the gradients with
reference.AdditiveAttentionBackward (1e-4 * max(1, max |reference|) per tensor).
--explain prints the plan: the two projections and the attention kernel.

Examples:
  # Python: np.savez("p.npz", W_q=Wq, W_k=Wk, b=b, w_a=wa)  (all float32)
  vkattn additive -q q.npy -k k.npy -v v.npy --params p.npz --check
  vkattn additive -q q.npy -k k.npy -v v.npy --params p.npz -o o.npy --weights w.npy --key-lengths 3,5
  vkattn additive -q q.npy -k k.npy -v v.npy --params p.npz --mask m.npy --mask-means block --explain
`

// additiveFlags are additive's command line.
type additiveFlags struct {
	qkvFlags
	params string
	masks  maskFlags
	lengthFlags
	outputFlags
	dout, grads string
	device      deviceChoice
	checkFlags
}

// additiveProblem is a loaded and validated additive run.
type additiveProblem struct {
	q, k, v *npyArray
	w       *nn.AdditiveWeights
	opts    vkattn.Options
	// q3, k3, v3 are the shapes as (B, positions, width).
	q3, k3, v3 [3]int
}

func runAdditive(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("additive", stderr)
	var f additiveFlags
	f.qkvFlags.register(fs, "(B,L,d_q) or (L,d_q)", "(B,S,d_k) or (S,d_k)", "(B,S,d_v) or (S,d_v)")
	fs.StringVar(&f.params, "params", "", "weights `P.npz|P.safetensors`: W_q (d_q,d_a), W_k (d_k,d_a), b (d_a, optional), w_a (d_a)")
	f.masks.register(fs, "(B,1,L,S)")
	f.lengthFlags.register(fs)
	f.outputFlags.register(fs, "write the output O to `OUT.npy`, (B,L,d_v) or (L,d_v)",
		"write the attention weights to `W.npy`, (B,L,S) or (L,S)", "write the log-sum-exp to `LSE.npy`, (B,L) or (L)")
	fs.StringVar(&f.dout, "dout", "", "the gradient of the loss with respect to O, `DO.npy` (O's shape); with --grads")
	fs.StringVar(&f.grads, "grads", "", "write the gradients of sum(O * DO) to `G.npz`: q, k, v, W_q, W_k, b, w_a")
	deviceFlag(fs, &f.device)
	f.checkFlags.register(fs, "projections, kernel variant, tiles, grid, masks")
	if ok, code := parseFlags(fs, additiveUsage, args, stdout, stderr); !ok {
		return code
	}
	switch {
	case f.missing():
		return usagef(stderr, "additive", "-q, -k and -v are required")
	case f.params == "":
		return usagef(stderr, "additive", "--params is required: W_q, W_k, b, w_a in a .npz or .safetensors file")
	case (f.dout == "") != (f.grads == ""):
		return usagef(stderr, "additive", "--dout DO.npy and --grads G.npz go together")
	}
	return runLayer("additive", f.device, &f.masks, append(f.paths(), outputFlag{"--grads", f.grads}), stdout, stderr,
		func(causal vkattn.Causal, meaning vkattn.MaskMeaning) (*additiveProblem, error) {
			return loadAdditive(&f, causal, meaning)
		},
		func(dev *vkattn.Device, p *additiveProblem, text io.Writer) int {
			return executeAdditive(&f, dev, p, text, stderr)
		})
}

// loadAdditive reads the inputs, weights and masks and validates them on
// the host, so bad input fails before a device is opened.
func loadAdditive(f *additiveFlags, causal vkattn.Causal, meaning vkattn.MaskMeaning) (*additiveProblem, error) {
	var shapes [3][3]int
	var q *npyArray // read first: K and V must have its rank
	in, err := f.read(func(i int, path string, a *npyArray) error {
		b, n, width, err := batchedShape(qkvNames[i], path, a.Shape)
		if err != nil {
			return err
		}
		if q == nil {
			q = a
		} else if len(a.Shape) != len(q.Shape) {
			return fmt.Errorf("%s %s has shape %v but Q %s has %v: give all with a batch axis or none", qkvNames[i], path, a.Shape, f.q, q.Shape)
		}
		shapes[i] = [3]int{b, n, width}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p := &additiveProblem{q: in[0], k: in[1], v: in[2], q3: shapes[0], k3: shapes[1], v3: shapes[2]}
	if p.w, err = weights.LoadAdditive(f.params, p.q3[2], p.k3[2]); err != nil {
		return nil, fmt.Errorf("--params: %w", err)
	}
	p.opts = vkattn.Options{
		Causal:      causal,
		WantLSE:     f.lse != "",
		WantWeights: f.weights != "",
	}
	f.apply(&p.opts)
	B, L, S := p.q3[0], p.q3[1], p.k3[1]
	if err := f.masks.load(&p.opts, meaning, vkattn.MaskShape{B, 1, L, S}); err != nil {
		return nil, err
	}
	// The attention kernel's problem, as Additive.Plan makes it: one head,
	// Q and K projected to d_a (their widths were checked by the loader).
	da := p.w.DA
	q4, k4, v4 := [4]int{B, 1, L, da}, [4]int{p.k3[0], 1, S, da}, [4]int{p.v3[0], 1, p.v3[1], p.v3[2]}
	if _, err := vkattn.CheckProblem(q4, k4, v4, &p.opts); err != nil {
		return nil, fmt.Errorf("Q %v, K %v, V %v: %w", p.q.Shape, p.k.Shape, p.v.Shape, err)
	}
	return p, nil
}

func executeAdditive(f *additiveFlags, dev *vkattn.Device, p *additiveProblem, stdout, stderr io.Writer) int {
	layer, err := nn.NewAdditive(dev, p.w)
	if err != nil {
		return failf(stderr, "additive", "--params %s: %v", f.params, err)
	}
	defer layer.Close()
	res, err := attendWith(dev, p.q, p.k, p.v, layer.Prepare, p.opts, f.explainTo(stdout))
	if err != nil {
		return failf(stderr, "additive", "%v", err)
	}

	// O drops the kernel's head axis: Q's leading axes, then d_v.
	oShape, wShape, lseShape := golden.OutputShapes(p.q.Shape, p.k3[1], p.v3[2])
	var chk *verdict.Check
	if f.check {
		ref, err := reference.AdditiveAttention(p.q.F32, p.q3, p.k.F32, p.k3, p.v.F32, p.v3, p.w, p.opts)
		if err != nil {
			return failf(stderr, "additive", "reference: %v", err)
		}
		chk = res.Check(ref, p.q.F32, p.k.F32, p.v.F32, p.opts.Scale)
	}

	var grads []output
	if f.grads != "" {
		g, err := additiveGrads(dev, layer, p, f.dout, oShape, f.check)
		if err != nil {
			return failf(stderr, "additive", "gradients: %v", err)
		}
		var code int
		if grads, code = layerGradients("additive", g, stdout, stderr); code != exitOK {
			return code
		}
	}
	outs := f.outputs(res, oShape, lseShape, wShape)
	plan := res.Plan
	if f.out == "" {
		fmt.Fprintf(stdout, "O %s: %s\n", shapeString(oShape), firstValues(res.O, 8))
		if !f.explain {
			fmt.Fprintf(stdout, "plan: %v\n", plan)
		}
		flops := plan.Dims.FLOPs()
		for _, l := range plan.Projections {
			flops += l.FLOPs()
		}
		fmt.Fprintf(stdout, "GPU time: %s\n", gpuTimeString(res.GPUTime, flops))
	}
	return finishLayer("additive", outs, chk, f.grads, grads, stdout, stderr)
}

// additiveGrads computes the gradients for --dout (Additive.Backward) as
// the members of --grads, and with check compares them with the
// reference's.
func additiveGrads(dev *vkattn.Device, layer *nn.Additive, p *additiveProblem, doutPath string, oShape []int, check bool) (*verify.Gradients, error) {
	dO, err := readFloatInput("--dout", doutPath)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(dO.Shape, oShape) {
		return nil, fmt.Errorf("--dout %s has shape %v; want O's %v: %w", doutPath, dO.Shape, oShape, vkattn.ErrShape)
	}
	// Float32 copies of the stored values: the layer's backward reads float32.
	in := func(a *npyArray) verify.Input { return verify.Input{Shape: a.Shape, Data: a.F32} }
	return verify.AdditiveGradients(dev, layer, p.w, in(p.q), in(p.k), in(p.v), in(dO), [3][3]int{p.q3, p.k3, p.v3}, p.opts, check)
}
