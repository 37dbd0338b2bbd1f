package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/internal/verify"
)

// Helpers shared by the layer commands, mha and additive.

// usageError is a mistake on the command line found only once an input was
// read (a bool mask without --mask-means): it exits with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// reportError reports err and returns its exit status: exitUsage for a
// usageError, exitFail otherwise.
func reportError(stderr io.Writer, cmd string, err error) int {
	var u usageError
	if errors.As(err, &u) {
		return usagef(stderr, cmd, "%s", u.msg)
	}
	return failf(stderr, cmd, "%v", err)
}

// runLayer is what mha and additive do once their flags parse: check the
// mask flags and output paths; read the inputs, weights and masks and
// validate them on the host (load), so bad input fails before a device is
// opened; then open the device and run the problem on it (execute),
// which prints its text to the writer it is given.
func runLayer[P any](cmd string, device deviceChoice, masks *maskFlags, outs []outputFlag, stdout, stderr io.Writer,
	load func(vkattn.Causal, vkattn.MaskMeaning) (P, error), execute func(*vkattn.Device, P, io.Writer) int) int {
	causal, meaning, err := masks.parse()
	if err != nil {
		return reportError(stderr, cmd, err)
	}
	if code := checkOutputPaths(cmd, stderr, outs); code != exitOK {
		return code
	}
	// With an output on standard output the command's own text goes to
	// standard error, so the stream stays a valid file.
	text, code := textStreams(cmd, false, stdout, stderr, outs)
	if code != exitOK {
		return code
	}
	p, err := load(causal, meaning)
	if err != nil {
		return reportError(stderr, cmd, err)
	}
	dev, err := vkattn.Open(device.with(vkattn.Config{}))
	if err != nil {
		return failf(stderr, cmd, "%v", err)
	}
	defer dev.Close()
	return execute(dev, p, text)
}

// maskFlags are the mask flags of the layer commands: one --mask file,
// float (additive) or bool with --mask-means, and --causal.
type maskFlags struct {
	mask, means, causal string
}

// register adds the flags; axes names the (B,H,L,S) axes the mask
// broadcasts to, e.g. "(B,h,T,S)".
func (m *maskFlags) register(fs *flag.FlagSet, axes string) {
	fs.StringVar(&m.mask, "mask", "", "mask `M.npy` broadcast to "+axes+": float values are added to the scores (-inf blocks); bool values need --mask-means")
	fs.StringVar(&m.means, "mask-means", "", "what true means in a bool --mask: `allow|block` (block: true = blocked, as PyTorch's MultiheadAttention; allow: true = may attend)")
	fs.StringVar(&m.causal, "causal", "none", "causal mask `alignment`: none, top-left (PyTorch is_causal) or bottom-right")
}

// parse checks the flags' values (errors are usage errors): the causal
// alignment and what true means in a bool mask (0 when not given).
func (m *maskFlags) parse() (vkattn.Causal, vkattn.MaskMeaning, error) {
	causal, err := vkattn.ParseCausal(m.causal)
	if err != nil {
		return 0, 0, usageError{fmt.Sprintf("--causal %q: want none, top-left or bottom-right", m.causal)}
	}
	var meaning vkattn.MaskMeaning
	switch m.means {
	case "":
	case "allow":
		meaning = vkattn.TrueAllows
	case "block":
		meaning = vkattn.TrueBlocks
	default:
		return 0, 0, usageError{fmt.Sprintf("--mask-means %q: want allow (true = may attend) or block (true = blocked)", m.means)}
	}
	if meaning != 0 && m.mask == "" {
		return 0, 0, usageError{"--mask-means says what true means in a bool --mask, but no --mask is given"}
	}
	return causal, meaning, nil
}

// load reads --mask, if given, into opts. full is the (B,H,L,S) extent the
// mask broadcasts to; the mask is validated against it here, so a bad mask
// fails before a device is opened, naming the file.
func (m *maskFlags) load(opts *vkattn.Options, meaning vkattn.MaskMeaning, full vkattn.MaskShape) error {
	if m.mask == "" {
		return nil
	}
	a, s, err := readMask("--mask", m.mask, func(shape []int) (vkattn.MaskShape, error) {
		return fitLayerMask(shape, full)
	})
	if err != nil {
		return err
	}
	check := vkattn.Options{}
	switch {
	case a.Bools != nil && meaning == 0:
		return usageError{fmt.Sprintf("--mask %s holds bool values: say with --mask-means allow|block whether true allows or blocks (PyTorch's bool attn_mask blocks)", m.mask)}
	case a.Bools != nil:
		check.BoolMasks = []vkattn.BoolMask{{Shape: s, Values: a.Bools, Meaning: meaning}}
	case meaning != 0:
		return usageError{fmt.Sprintf("--mask-means applies to a bool mask, but --mask %s holds %s values (an additive float mask)", m.mask, a.DType)}
	default:
		check.Mask = &vkattn.Mask{Shape: s, Values: a.F32}
	}
	if err := check.Validate(vkattn.Dims{B: full[0], H: full[1], L: full[2], S: full[3]}); err != nil {
		return fmt.Errorf("--mask %s (shape %v): %w", m.mask, a.Shape, err)
	}
	opts.Mask, opts.BoolMasks = check.Mask, check.BoolMasks
	return nil
}

// fitLayerMask fits a mask's shape to full (B,H,L,S): NumPy broadcasting
// from the left, as run's masks, except that a 3-D (B*H,L,S) mask with
// B > 1 is PyTorch's per-batch-and-head attn_mask, (B,H,L,S). The two
// readings never disagree: NumPy's (H,L,S) differs from (B*H,L,S) when
// B > 1, and they are the same for B = 1.
func fitLayerMask(shape []int, full vkattn.MaskShape) (vkattn.MaskShape, error) {
	if len(shape) == 3 && full[0] > 1 && shape[0] == full[0]*full[1] {
		return vkattn.MaskShape{full[0], full[1], shape[1], shape[2]}, nil
	}
	return golden.FillMaskShape(shape)
}

// batchedShape reads an input of rank 3 (B,T,width) or 2 (T,width) as
// (B,T,width); name and path are for errors.
func batchedShape(name, path string, shape []int) (b, t, width int, err error) {
	if len(shape) != 2 && len(shape) != 3 {
		return 0, 0, 0, fmt.Errorf("%s %s has shape %v: want (B,T,width) or (T,width)", name, path, shape)
	}
	for _, n := range shape {
		if n <= 0 {
			return 0, 0, 0, fmt.Errorf("%s %s has shape %v: every axis must be at least 1", name, path, shape)
		}
	}
	b = 1
	if len(shape) == 3 {
		b = shape[0]
	}
	return b, shape[len(shape)-2], shape[len(shape)-1], nil
}

// finishOutputs writes outs and the staged files more, all or none,
// unless the check failed, and reports what it wrote and the check's
// verdict. A failed check writes nothing and exits 1.
func finishOutputs(cmd string, outs []output, more []*pendingFile, chk *verdict.Check, stdout, stderr io.Writer) int {
	if chk == nil || chk.OK() {
		if err := writeNPYFiles(outs, more...); err != nil {
			return failf(stderr, cmd, "%v", err)
		}
		for _, o := range outs {
			fmt.Fprintf(stdout, "wrote %s %s to %s\n", o.name, shapeString(o.shape), o.path)
		}
	} else {
		for _, p := range more {
			p.discard()
		}
	}
	if chk != nil {
		fmt.Fprintln(stdout, chk.String())
		if !chk.OK() {
			return failf(stderr, cmd, "check failed: the GPU result differs from the float64 reference (%s); no output written", chk.Worst())
		}
	}
	return exitOK
}

// layerGradients reports a layer's gradient check, failing the command
// when it does not hold, and returns the gradients as --grads members.
func layerGradients(cmd string, g *verify.Gradients, stdout, stderr io.Writer) ([]output, int) {
	if c := g.Check; c != nil {
		if !c.Pass {
			return nil, failf(stderr, cmd, "check failed: the gradients differ from the float64 reference (%s, %.3g times the bound); no output written", c.Worst(), float64(c.Ratio))
		}
		fmt.Fprintf(stdout, "gradients vs float64 reference: max abs err %.3g, worst %.3g times the bound 1e-4 * max(1, max|ref|): ok\n", float64(c.MaxAbs), float64(c.Ratio))
	}
	outs := make([]output, len(g.Grads))
	for i, x := range g.Grads {
		outs[i] = output{name: x.Name, shape: x.Shape, data: x.Data}
	}
	return outs, exitOK
}

// finishLayer is finishOutputs with --grads (the gradients, nil without
// it) as one .npz file among the outputs.
func finishLayer(cmd string, outs []output, chk *verdict.Check, gradsPath string, grads []output, stdout, stderr io.Writer) int {
	var more []*pendingFile
	if grads != nil && (chk == nil || chk.OK()) {
		p, err := stageArraysNPZ(gradsPath, grads)
		if err != nil {
			return failf(stderr, cmd, "--grads: %v", err)
		}
		more = append(more, p)
	}
	if code := finishOutputs(cmd, outs, more, chk, stdout, stderr); code != exitOK || grads == nil {
		return code
	}
	fmt.Fprintf(stdout, "wrote %d gradients to %s\n", len(grads), gradsPath)
	return exitOK
}
