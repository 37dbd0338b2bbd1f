package main

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/verify"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/weights"
)

const mhaUsage = `Usage: vkattn mha -x X.npy [--kv KV.npy] --params P.npz|P.safetensors --heads H -o OUT.npy [flags]

Runs a PyTorch nn.MultiheadAttention layer (batch_first=True, eval mode) on
a Vulkan device, as one submission: the input projections, the attention of
every head, the output projection and, with --weights, the weights.

Inputs are .npy files (float32 or float16, which stays float16 on the device;
float64 is converted; --dtype stores them as another type). With float16
inputs and float16 weights the input projections run on the device's
cooperative matrices when it has them (exact products, float32 sums;
--fp32-products keeps them off):
  -x X.npy      the query input (B,T,d), batch first, or (T,d) for one
                sequence (PyTorch's unbatched mode: the outputs drop B too)
  --kv KV.npy   the key = value input (B,S,kdim) of cross-attention, such as
                an encoder's memory; without it the layer attends over X
d (embed_dim) is X's last axis; kdim = vdim is KV's last axis (d without --kv).

--params reads the layer's state_dict saved at top level, as .npz
(numpy.savez("p.npz", **{k: v.numpy() for k, v in mha.state_dict().items()}))
or .safetensors (safetensors.torch.save_file(mha.state_dict(), "p.safetensors")):
  in_proj_weight (3d,d)                          when kdim = vdim = d
  q_proj_weight (d,d), k_proj_weight (d,kdim),
  v_proj_weight (d,vdim)                         otherwise
  in_proj_bias (3d), out_proj.weight (d,d), out_proj.bias (d)   (biases optional)
--heads H is num_heads; it must divide d. add_bias_kv is not supported.

Masks combine, with PyTorch's meanings:
  --key-padding M.npy    bool (B,S), or (S) for a (T,d) X: true = padding
  --mask M.npy           attn_mask: float values are added to the scores and
                         -inf blocks; a bool mask needs --mask-means (block for
                         PyTorch's bool attn_mask, allow if true = may attend).
                         (T,S), (h,T,S) or (B,h,T,S) broadcast to (B,h,T,S)
                         from the left; PyTorch's (B*h,T,S) reads as (B,h,T,S)
  --causal top-left      query t sees keys j <= t (PyTorch is_causal)
  --causal bottom-right  query t sees keys j <= t + S - T
A query row whose every key is masked gets zero attention, so its output is
out_proj.bias (zeros without a bias), where PyTorch gives NaN.

` + outputRule + `Outputs:
  -o OUT.npy           attn_output, (B,T,d)
  --weights W.npy      attention weights per head, (B,h,T,S); with
                       --average-weights their mean over heads, (B,T,S)
                       (PyTorch need_weights, average_attn_weights)

Gradients (training): --dout DY.npy, the gradient of the loss with
respect to attn_output (OUT's shape), and --grads G.npz write the
gradients of sum(OUT * DY) as one .npz: x (X's shape), kv (KV's, for
cross-attention: the key's and the value's summed, KV being both) and
every parameter by its state_dict name (in_proj_weight or
q/k/v_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias). The
whole backward pass runs on the device (MHA.Backward: every head's
attention and the dense layers' gradients, float32 sums in a fixed
order), one submission; the gradients are read back to be written.

--check compares with the float64 reference (reference.MultiHeadAttention)
and exits 1, writing nothing, if any |GPU - reference| > 1e-4 * max(1, |reference|);
with --grads it also compares the gradients with reference.MultiHeadAttentionBackward
(1e-4 * max(1, max |reference|) per tensor).
--explain prints the plan: each dense layer, the per-head attention kernel.

Examples:
  # Python: mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
  #         safetensors.torch.save_file(mha.state_dict(), "mha.safetensors")
  vkattn mha -x x.npy --params mha.safetensors --heads 2 -o out.npy --check
  vkattn mha -x x.npy --params mha.npz --heads 2 --causal top-left -o out.npy --explain
  vkattn mha -x tgt.npy --kv memory.npy --params cross.npz --heads 4 \
      --key-padding pad.npy -o out.npy --weights w.npy --average-weights
`

// mhaFlags are mha's command line.
type mhaFlags struct {
	x, kv, params string
	heads         int
	keyPadding    string
	masks         maskFlags
	out, weights  string
	average       bool
	dout, grads   string
	dtype         string
	store         *vkattn.DType // --dtype parsed; nil: as the files
	fp32Products  bool
	device        deviceChoice
	checkFlags
}

// mhaProblem is a loaded and validated mha run.
type mhaProblem struct {
	x, kv       *npyArray // kv nil for self-attention
	dout        *npyArray // --dout; nil without
	w           *nn.MHAWeights
	opts        nn.MHAOptions
	B, T, S, d  int
	batched     bool // X has rank 3
	outShape    []int
	weightShape []int // of what --weights writes
}

func runMHA(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("mha", stderr)
	var f mhaFlags
	fs.StringVar(&f.x, "x", "", "query input `X.npy`, (B,T,d) or (T,d); d is embed_dim")
	fs.StringVar(&f.kv, "kv", "", "key = value input `KV.npy` for cross-attention, (B,S,kdim) or (S,kdim); default: X (self-attention)")
	fs.StringVar(&f.params, "params", "", "the layer's state_dict, `P.npz|P.safetensors` (in_proj_weight or q/k/v_proj_weight, out_proj.weight, biases)")
	fs.IntVar(&f.heads, "heads", 0, "number of heads `H` (num_heads); must divide d")
	fs.StringVar(&f.keyPadding, "key-padding", "", "bool key_padding_mask `M.npy`, (B,S) or (S): true = padding, ignored")
	f.masks.register(fs, "(B,h,T,S)")
	fs.StringVar(&f.out, "o", "", "write attn_output to `OUT.npy`, (B,T,d) or (T,d)")
	fs.StringVar(&f.weights, "weights", "", "write the attention weights per head to `W.npy`, (B,h,T,S)")
	fs.BoolVar(&f.average, "average-weights", false, "with --weights: write their mean over heads instead, (B,T,S)")
	fs.StringVar(&f.dout, "dout", "", "the gradient of the loss with respect to attn_output, `DY.npy` (OUT's shape); with --grads")
	fs.StringVar(&f.grads, "grads", "", "write the gradients of sum(OUT * DY) to `G.npz`: x, kv and every parameter by name")
	fs.StringVar(&f.dtype, "dtype", "", "store X and KV on the device as `T`: f32, f16 or bf16 (default: as the file, f16 for <f2, else f32)")
	fs.BoolVar(&f.fp32Products, "fp32-products", false, "float16 inputs and weights: keep the projections off the device's cooperative matrices (SEMANTICS.md §9.3)")
	deviceFlag(fs, &f.device)
	f.checkFlags.register(fs, "dense layers, attention kernel, masks")
	if ok, code := parseFlags(fs, mhaUsage, args, stdout, stderr); !ok {
		return code
	}
	switch {
	case f.x == "":
		return usagef(stderr, "mha", "-x is required")
	case f.params == "":
		return usagef(stderr, "mha", "--params is required: the layer's weights, .npz or .safetensors")
	case f.heads <= 0:
		return usagef(stderr, "mha", "--heads H is required: a positive number of heads that divides d")
	case f.out == "":
		return usagef(stderr, "mha", "-o is required")
	case f.average && f.weights == "":
		return usagef(stderr, "mha", "--average-weights needs --weights W.npy")
	case (f.dout == "") != (f.grads == ""):
		return usagef(stderr, "mha", "--dout DY.npy and --grads G.npz go together")
	}
	if f.dtype != "" {
		t, err := vkattn.ParseDType(f.dtype)
		if err != nil || !t.Valid() {
			return usagef(stderr, "mha", "--dtype %q: want f32, f16 or bf16", f.dtype)
		}
		f.store = &t
	}
	return runLayer("mha", f.device, &f.masks, []outputFlag{{"-o", f.out}, {"--weights", f.weights}, {"--grads", f.grads}}, stdout, stderr,
		func(causal vkattn.Causal, meaning vkattn.MaskMeaning) (*mhaProblem, error) {
			return loadMHA(&f, causal, meaning)
		},
		func(dev *vkattn.Device, p *mhaProblem, text io.Writer) int {
			return executeMHA(&f, dev, p, text, stderr)
		})
}

// loadMHA reads the inputs, weights and masks and validates them on the
// host, so bad input fails before a device is opened.
func loadMHA(f *mhaFlags, causal vkattn.Causal, meaning vkattn.MaskMeaning) (*mhaProblem, error) {
	p := &mhaProblem{}
	var err error
	if p.x, err = readLayerInput("X", f.x, f.store); err != nil {
		return nil, err
	}
	if p.B, p.T, p.d, err = batchedShape("X", f.x, p.x.Shape); err != nil {
		return nil, err
	}
	p.batched = len(p.x.Shape) == 3
	p.S = p.T
	kdim := p.d
	if f.kv != "" {
		if p.kv, err = readLayerInput("KV", f.kv, f.store); err != nil {
			return nil, err
		}
		var b int
		if b, p.S, kdim, err = batchedShape("KV", f.kv, p.kv.Shape); err != nil {
			return nil, err
		}
		switch {
		case len(p.kv.Shape) != len(p.x.Shape):
			return nil, fmt.Errorf("KV %s has shape %v but X %s has %v: give both with a batch axis or neither", f.kv, p.kv.Shape, f.x, p.x.Shape)
		case b != p.B:
			return nil, fmt.Errorf("KV %s has batch size %d but X %s has %d", f.kv, b, f.x, p.B)
		}
	}
	if p.d%f.heads != 0 {
		return nil, fmt.Errorf("--heads %d does not divide embed_dim d = %d (the last axis of X %s)", f.heads, p.d, f.x)
	}
	if p.w, err = weights.LoadMHA(f.params, p.d, kdim, kdim); err != nil {
		if errors.Is(err, vkattn.ErrShape) {
			from := "X, without --kv"
			if f.kv != "" {
				from = "KV's last axis"
			}
			return nil, fmt.Errorf("--params: %w (embed_dim d = %d is X's last axis, kdim = vdim = %d from %s)", err, p.d, kdim, from)
		}
		return nil, fmt.Errorf("--params: %w", err)
	}

	h := f.heads
	p.opts = nn.MHAOptions{Heads: h, NeedWeights: f.weights != ""}
	p.opts.Attention.Causal = causal
	p.opts.Attention.Float32Products = f.fp32Products
	if f.keyPadding != "" {
		a, err := readNPY(f.keyPadding)
		if err != nil {
			return nil, err
		}
		if a.Bools == nil {
			return nil, fmt.Errorf("--key-padding %s holds %s values; want bool, true = padding", f.keyPadding, a.DType)
		}
		ok := slices.Equal(a.Shape, []int{p.B, p.S})
		want := fmt.Sprintf("(B,S) = (%d,%d)", p.B, p.S)
		if !p.batched {
			ok = ok || slices.Equal(a.Shape, []int{p.S})
			want = fmt.Sprintf("(S) = (%d)", p.S)
		}
		if !ok {
			return nil, fmt.Errorf("--key-padding %s has shape %v: want %s", f.keyPadding, a.Shape, want)
		}
		p.opts.KeyPadding = &nn.KeyPadding{Padded: a.Bools}
	}
	if err := f.masks.load(&p.opts.Attention, meaning, vkattn.MaskShape{p.B, h, p.T, p.S}); err != nil {
		return nil, err
	}

	if f.dout != "" {
		if p.dout, err = readFloatInput("--dout", f.dout); err != nil {
			return nil, err
		}
		if !slices.Equal(p.dout.Shape, p.x.Shape) {
			return nil, fmt.Errorf("--dout %s has shape %v; want attn_output's %v: %w", f.dout, p.dout.Shape, p.x.Shape, vkattn.ErrShape)
		}
	}
	// PyTorch's unbatched mode: outputs drop B as X does.
	lead := []int{p.B}
	if !p.batched {
		lead = nil
	}
	p.outShape = append(slices.Clone(lead), p.T, p.d)
	if f.average {
		p.weightShape = append(slices.Clone(lead), p.T, p.S)
	} else {
		p.weightShape = append(slices.Clone(lead), h, p.T, p.S)
	}
	return p, nil
}

func executeMHA(f *mhaFlags, dev *vkattn.Device, p *mhaProblem, stdout, stderr io.Writer) int {
	layer, err := nn.NewMHA(dev, p.w)
	if err != nil {
		return failf(stderr, "mha", "--params %s: %v", f.params, err)
	}
	defer layer.Close()
	res, chk, err := verify.MHAForward(dev, layer, p.w, *p.x.input(), p.kv.input(), p.opts, f.average, f.check, p.explainer(f.explainTo(stdout)))
	if err != nil {
		return failf(stderr, "mha", "%v", err)
	}
	if f.explain {
		fmt.Fprintf(stdout, "GPU time: %s\n", gpuTimeString(res.GPUTime, res.LayerPlan.FLOPs()))
	}
	var grads []output
	if f.grads != "" {
		g, err := verify.MHAGradients(dev, layer, p.w, *p.x.input(), p.kv.input(), *p.dout.input(), p.opts, f.check)
		if err != nil {
			return failf(stderr, "mha", "gradients: %v", err)
		}
		var code int
		if grads, code = layerGradients("mha", g, stdout, stderr); code != exitOK {
			return code
		}
	}
	outs := []output{{"out", f.out, p.outShape, res.O}}
	if f.weights != "" {
		name := "weights"
		if f.average {
			name = "averaged weights"
		}
		outs = append(outs, output{name, f.weights, p.weightShape, res.Weights})
	}
	return finishLayer("mha", outs, chk, f.grads, grads, stdout, stderr)
}

// explainer prints the layer's plan and masks to w before it runs; nil
// for a nil w.
func (p *mhaProblem) explainer(w io.Writer) func(nn.MHAPlan) {
	if w == nil {
		return nil
	}
	return func(plan nn.MHAPlan) { p.explain(w, plan) }
}

func (p *mhaProblem) explain(stdout io.Writer, plan nn.MHAPlan) {
	fmt.Fprintf(stdout, "plan: %v\n", plan)
	masks := p.opts.Attention.MaskSummary()
	if p.opts.KeyPadding != nil {
		kp := fmt.Sprintf("key padding (%d,%d)", p.B, p.S)
		if masks == "none" {
			masks = kp
		} else {
			masks = kp + ", " + masks
		}
	}
	fmt.Fprintf(stdout, "  masks: %s\n", masks)
}
