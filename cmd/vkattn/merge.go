package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/reference"
	"github.com/vkattn/vkattn/weights"
)

const mergeUsage = `Usage: vkattn merge [-o O.npy] [--lse LSE.npy] PART.npz... [flags]

Merges partial attentions into the attention over all their keys, on the
device (SEMANTICS.md §7.1). A part is the attention of the same queries
over some of the keys, with its log-sum-exp: what 'vkattn run -o O.npy
--lse LSE.npy' writes for K and V holding those keys. The merge is

  LSE = ln sum_i exp(LSE_i)     O = sum_i exp(LSE_i - LSE) O_i

exactly the attention over the union of the parts' keys, in any order of
the parts. A part that saw no key (LSE -inf, O 0) changes nothing. This
is how a long context split across devices or machines is put back
together, and how cascade inference joins a shared prefix's attention
with each sequence's own suffix.

Each part is a .npz file holding the arrays o and lse (numpy.savez(f,
o=o, lse=lse)), or two .npy files given as O.npy,LSE.npy. O is (L,d_v),
(H,L,d_v) or (B,H,L,d_v); LSE has O's shape without d_v (as run writes
it) or with 1 in its place. Every part has the same shapes.

What each part sees is up to the calls that made it: masks and causal
alignment count within a part's own keys. For queries that are the last
tokens of a sequence, a prefix part is NotCausal and the suffix part
--causal bottom-right; see SEMANTICS.md §7.1 for the rest (sinks: give
them to one part only).

Without -o the first values of O are printed.

Examples:
  vkattn run -q q.npy -k k_prefix.npy -v v_prefix.npy -o o1.npy --lse lse1.npy
  vkattn run -q q.npy -k k_suffix.npy -v v_suffix.npy --causal bottom-right -o o2.npy --lse lse2.npy
  vkattn merge -o o.npy --lse lse.npy o1.npy,lse1.npy o2.npy,lse2.npy
  vkattn merge -o o.npy shard0.npz shard1.npz shard2.npz --check

` + outputRule

// mergeFlags are merge's command line.
type mergeFlags struct {
	out, lse string
	check    bool
	device   deviceChoice
}

// mergePart is one part as read from its files.
type mergePart struct {
	name        string
	o, lse      []float32
	oShape, lsS []int // lsS: LSE's shape
}

func runMerge(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("merge", stderr)
	var f mergeFlags
	fs.StringVar(&f.out, "o", "", "write the merged O to `O.npy`, the parts' O shape")
	fs.StringVar(&f.lse, "lse", "", "write the merged log-sum-exp to `LSE.npy`, the first part's LSE shape")
	fs.BoolVar(&f.check, "check", false, "compare with the parts merged in float64 (reference.Merge); exit 1 if it disagrees")
	deviceFlag(fs, &f.device)
	files, ok, code := parseWithOperands(fs, mergeUsage, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(files) == 0 {
		return usagef(stderr, "merge", "no parts given: name each part's PART.npz (or O.npy,LSE.npy)")
	}
	outs := []outputFlag{{"-o", f.out}, {"--lse", f.lse}}
	if code := checkOutputPaths("merge", stderr, outs); code != exitOK {
		return code
	}
	stdout, code = textStreams("merge", false, stdout, stderr, outs)
	if code != exitOK {
		return code
	}
	parts := make([]mergePart, len(files))
	for i, name := range files {
		p, err := readPart(name)
		if err != nil {
			return failf(stderr, "merge", "%v", err)
		}
		if i > 0 && !slices.Equal(p.oShape, parts[0].oShape) {
			return failf(stderr, "merge", "%s: O is %s, but %s's %s: the parts of a merge share their shapes",
				name, shapeString(p.oShape), files[0], shapeString(parts[0].oShape))
		}
		parts[i] = p
	}

	dev, ctx, done, code := openInterruptible("merge", f.device, stderr, nil)
	if code != exitOK {
		return code
	}
	defer done()
	o, lse, err := mergeOnDevice(ctx, dev, parts)
	if ctx.Err() != nil {
		return failf(stderr, "merge", "interrupted: no output written")
	}
	if err != nil {
		return failf(stderr, "merge", "%v", err)
	}
	var chk *verdict.Check
	if f.check {
		want, err := mergeReference(parts)
		if err != nil {
			return failf(stderr, "merge", "reference: %v", err)
		}
		chk = &verdict.Check{}
		chk.Add("O", o, want.O)
		chk.Add("LSE", lse, want.LSE)
		if !chk.OK() {
			return failf(stderr, "merge", "check failed: the device's merge differs from the float64 one (%s); no output written", chk.Worst())
		}
	}
	if err := writeNPYFiles(slices.DeleteFunc([]output{{"O", f.out, parts[0].oShape, o}, {"LSE", f.lse, parts[0].lsS, lse}},
		func(o output) bool { return o.path == "" })); err != nil {
		return failf(stderr, "merge", "%v", err)
	}
	what := fmt.Sprintf("%d parts", len(parts))
	if len(parts) == 1 {
		what = "1 part"
	}
	fmt.Fprintf(stdout, "merged %s: O %s, LSE %s\n", what, shapeString(parts[0].oShape), shapeString(parts[0].lsS))
	if f.out == "" {
		fmt.Fprintf(stdout, "O: %s\n", firstValues(o, 8))
	}
	if chk != nil {
		fmt.Fprintln(stdout, chk.String())
	}
	return exitOK
}

// parseWithOperands is parseFlags for a command that also takes operands
// (file names) before, between or after its flags; it returns them.
func parseWithOperands(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (operands []string, ok bool, code int) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			ok, code := parseFlags(fs, usage, []string{"-h"}, stdout, stderr)
			return nil, ok, code
		}
		if err != nil {
			fmt.Fprintf(stderr, "run '%s -h' for usage\n", fs.Name())
			return nil, false, exitUsage
		}
		if fs.NArg() == 0 {
			return operands, true, exitOK
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// readPart reads a part: a .npz holding o and lse, or "O.npy,LSE.npy".
func readPart(name string) (mergePart, error) {
	p := mergePart{name: name}
	if oPath, lsePath, pair := strings.Cut(name, ","); pair {
		o, err := readNPY(oPath)
		if err != nil {
			return p, err
		}
		l, err := readNPY(lsePath)
		if err != nil {
			return p, err
		}
		if o.F32 == nil || l.F32 == nil {
			return p, fmt.Errorf("%s: O and LSE must hold floats", name)
		}
		p.o, p.oShape, p.lse, p.lsS = o.F32, o.Shape, l.F32, l.Shape
	} else {
		f, err := weights.Open(name)
		if err != nil {
			return p, err
		}
		defer f.Close()
		for _, m := range []struct {
			member string
			data   *[]float32
			shape  *[]int
		}{{"o", &p.o, &p.oShape}, {"lse", &p.lse, &p.lsS}} {
			t, err := f.Read(m.member)
			if err != nil {
				return p, fmt.Errorf("%w (a part's .npz holds o and lse: numpy.savez(f, o=o, lse=lse))", err)
			}
			if t.Data == nil || t.DType == "BOOL" {
				return p, fmt.Errorf("%s: %s is %s: want floats", name, m.member, t.DType)
			}
			*m.data, *m.shape = t.Data, t.Shape
		}
	}
	if i := vkattn.FirstNonFinite(p.o); i >= 0 {
		return p, fmt.Errorf("%s: O value %d is %v: %w", name, i, p.o[i], vkattn.ErrNonFinite)
	}
	for i, x := range p.lse {
		if x != x || math.IsInf(float64(x), 1) {
			return p, fmt.Errorf("%s: LSE value %d is %v (a log-sum-exp is finite, or -inf on a row that saw no key): %w", name, i, x, vkattn.ErrNonFinite)
		}
	}
	return p, checkPartShapes(p)
}

// checkPartShapes checks a part's O (rank 2 to 4) against its LSE: O's
// shape without d_v, or with 1 for it.
func checkPartShapes(p mergePart) error {
	if _, err := vkattn.Shape4(p.oShape); err != nil {
		return fmt.Errorf("%s: O: %w", p.name, err)
	}
	rows := p.oShape[:len(p.oShape)-1]
	if !slices.Equal(p.lsS, rows) && !slices.Equal(p.lsS, append(slices.Clone(rows), 1)) {
		return fmt.Errorf("%s: LSE is %s for O %s: want %s (O's shape without d_v) or %s: %w", p.name, shapeString(p.lsS),
			shapeString(p.oShape), shapeString(rows), shapeString(append(slices.Clone(rows), 1)), vkattn.ErrShape)
	}
	return nil
}

// mergeOnDevice uploads the parts, merges them and returns O and LSE.
func mergeOnDevice(ctx context.Context, dev *vkattn.Device, parts []mergePart) (o, lse []float32, err error) {
	var ps []vkattn.Part
	defer func() {
		for _, p := range ps {
			p.O.Close()
			p.LSE.Close()
		}
	}()
	for _, p := range parts {
		ot, err := dev.Upload(p.oShape, p.o)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: O: %w", p.name, err)
		}
		s := ot.Shape()
		lt, err := dev.Upload([]int{s[0], s[1], s[2], 1}, p.lse)
		if err != nil {
			ot.Close()
			return nil, nil, fmt.Errorf("%s: LSE: %w", p.name, err)
		}
		ps = append(ps, vkattn.Part{O: ot, LSE: lt})
	}
	out, err := dev.MergeContext(ctx, ps)
	if err != nil {
		return nil, nil, err
	}
	defer out.Close()
	if o, err = out.O.Download(); err != nil {
		return nil, nil, err
	}
	lse, err = out.LSE.Download()
	return o, lse, err
}

// mergeReference is the parts merged in float64.
func mergeReference(parts []mergePart) (*reference.Result, error) {
	var rs []*reference.Result
	for _, p := range parts {
		s, err := vkattn.Shape4(p.oShape)
		if err != nil {
			return nil, err
		}
		r := &reference.Result{Dims: vkattn.Dims{B: s[0], H: s[1], L: s[2], DV: s[3]}, O: make([]float64, len(p.o)), LSE: make([]float64, len(p.lse))}
		for i, x := range p.o {
			r.O[i] = float64(x)
		}
		for i, x := range p.lse {
			r.LSE[i] = float64(x)
		}
		rs = append(rs, r)
	}
	return reference.Merge(rs)
}
