// Package verify runs attention problems on a device against what they
// should give: the golden cases against their expected values and the
// float64 reference, random problems against the reference (vkattn
// verify, and the tests).
package verify

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/golden"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// Outputs are a call's results, downloaded: O, and the log-sum-exp and
// weights where the options asked for them (for a layer: its output, and
// its weights where asked; no Plan).
type Outputs struct {
	O, LSE, Weights []float32
	Plan            vkattn.Plan
	LayerPlan       nn.MHAPlan    // MHAForward's
	GPUTime         time.Duration // 0 without timestamps
}

// Run uploads p's Q, K and V as types (their values already rounded to
// them; zero types are float32), runs the attention p's options ask for
// and downloads its outputs.
func Run(dev *vkattn.Device, p *golden.Problem, types [3]vkattn.DType) (*Outputs, error) {
	return RunCall(dev, Input{Shape: p.QShape, Data: p.Q, Type: types[0]}, Input{Shape: p.KShape, Data: p.K, Type: types[1]},
		&Input{Shape: p.VShape, Data: p.V, Type: types[2]}, func(q, k, v *vkattn.Tensor) (*vkattn.Call, error) {
			return dev.Prepare(q, k, v, p.Opts)
		}, nil)
}

// Case runs golden case c on dev and says in one line how far O, the
// weights and the log-sum-exp (those it has) are from its expected values
// (its tolerance) and from the float64 reference (verdict.VerifyTolerance),
// and whether both hold.
func Case(dev *vkattn.Device, c *golden.Case) (string, bool) {
	p, err := c.Problem()
	if err != nil {
		return "error: " + err.Error(), false
	}
	res, err := Run(dev, p, [3]vkattn.DType{})
	if err != nil {
		return "device error: " + err.Error(), false
	}
	ref, err := reference.Attention(p.Q, p.Q4, p.K, p.K4, p.V, p.V4, p.Opts)
	if err != nil {
		return "reference error: " + err.Error(), false
	}
	tol := c.Tolerance()
	ok := true
	var expErr, refErr float64
	var worst []string
	compare := func(what string, got []float32, want *golden.Array, refVals []float64) {
		if want != nil {
			d := verdict.MaxAbsDiff(got, want.Float64())
			expErr = math.Max(expErr, d)
			if !(d <= tol) {
				ok = false
				worst = append(worst, fmt.Sprintf("%s off expected by %.3g", what, d))
			}
		}
		if len(got) != len(refVals) {
			ok = false
			worst = append(worst, fmt.Sprintf("%s has %d values, reference %d", what, len(got), len(refVals)))
			return
		}
		cmp := verdict.Compare(got, refVals, verdict.VerifyTolerance)
		refErr = math.Max(refErr, cmp.MaxAbs)
		if !cmp.OK() {
			ok = false
			worst = append(worst, fmt.Sprintf("%s off reference by %.3g", what, cmp.MaxAbs))
		}
	}
	compare("O", res.O, c.Expect.O, ref.O)
	if res.Weights != nil {
		compare("A", res.Weights, c.Expect.A, ref.Weights)
	}
	if res.LSE != nil {
		compare("LSE", res.LSE, c.Expect.LSE, ref.LSE)
	}
	line := fmt.Sprintf("max err %.2e (tol %.0e), vs reference %.2e", expErr, tol, refErr)
	if len(worst) > 0 {
		line += ": " + strings.Join(worst, ", ")
	}
	return line, ok
}

// RandomCase is case i of a random sweep (verify --random): odd shapes,
// d_k != d_v up to 256, grouped-query heads, decode shapes (one query row,
// many keys), every mask kind, per-item lengths, half inputs, LSE and
// weights. It returns the problem (its values rounded to types), the
// element types to store Q, K and V as, and a name saying what it holds.
func RandomCase(rng *rand.Rand, i int) (*golden.Problem, [3]vkattn.DType, string, error) {
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	b, hkv := pick(1, 2, 3), pick(1, 2, 4)
	h := min(8, hkv*pick(1, 2, 4))
	l, s := pick(1, 2, 3, 17, 64, 129), pick(1, 3, 17, 64, 129, 300)
	if i%4 == 3 { // decode: split-K where the plan has it
		l, s = 1, pick(256, 1000, 2053)
	}
	dk := pick(1, 8, 33, 64, 128, 256)
	dv := dk
	if rng.IntN(2) == 0 {
		dv = pick(1, 8, 33, 64, 128, 256)
	}
	for b*h*l*s*(dk+dv) > 4_000_000 { // keep the float64 reference quick
		l, s = max(1, l/2), max(1, s/2)
	}
	in, shapes := random.QKV(rng, random.Normal, b, h, hkv, l, s, dk, dv)
	p := &golden.Problem{Q: in[0], K: in[1], V: in[2], Q4: shapes[0], K4: shapes[1], V4: shapes[2]}
	p.QShape, p.KShape, p.VShape = p.Q4[:], p.K4[:], p.V4[:]
	name := fmt.Sprintf("random%03d B%d H%d Hkv%d L%d S%d dk%d dv%d", i, b, h, hkv, l, s, dk, dv)
	if rng.IntN(2) == 0 {
		p.Opts.Causal = []vkattn.Causal{vkattn.CausalTopLeft, vkattn.CausalBottomRight}[rng.IntN(2)]
		name += " causal-" + p.Opts.Causal.String()
	}
	if rng.IntN(2) == 0 {
		m := &vkattn.Mask{Shape: vkattn.MaskShape{b, 1, l, s}, Values: make([]float32, b*l*s)}
		for j := range m.Values {
			m.Values[j] = float32(3 * (rng.Float64() - 0.5))
			if rng.IntN(5) == 0 {
				m.Values[j] = float32(math.Inf(-1))
			}
		}
		p.Opts.Mask = m
		name += " additive"
	}
	if rng.IntN(3) == 0 {
		bm := vkattn.BoolMask{Shape: vkattn.MaskShape{1, h, 1, s}, Values: make([]bool, h*s), Meaning: vkattn.TrueAllows}
		for j := range bm.Values {
			bm.Values[j] = rng.IntN(4) != 0
		}
		p.Opts.BoolMasks = []vkattn.BoolMask{bm}
		name += " bool"
	}
	if rng.IntN(2) == 0 {
		p.Opts.KeyLengths, p.Opts.QueryLengths = make([]int, b), make([]int, b)
		for j := range p.Opts.KeyLengths {
			p.Opts.KeyLengths[j], p.Opts.QueryLengths[j] = rng.IntN(s+1), rng.IntN(l+1)
		}
		name += fmt.Sprintf(" lengths%v/%v", p.Opts.KeyLengths, p.Opts.QueryLengths)
	}
	types := [][3]vkattn.DType{{}, {}, {vkattn.Float32, vkattn.Float16, vkattn.Float16}, {vkattn.BFloat16, vkattn.BFloat16, vkattn.BFloat16}}[i%4]
	for j, x := range []*[]float32{&p.Q, &p.K, &p.V} {
		rounded, err := vkattn.Round(types[j], *x)
		if err != nil {
			return nil, types, name, err
		}
		*x = rounded
	}
	if types != [3]vkattn.DType{} {
		name += fmt.Sprintf(" %v/%v/%v", types[0], types[1], types[2])
	}
	p.Opts.WantLSE = rng.IntN(2) == 0
	p.Opts.WantWeights = l > 1 && rng.IntN(3) == 0
	d, err := vkattn.CheckProblem(p.Q4, p.K4, p.V4, &p.Opts)
	p.Dims = d
	return p, types, name, err
}

// Random runs a random case (RandomCase) and compares every output with
// the float64 reference on the values as stored (verdict.Check): the
// kernel and the check in one line, and whether it holds.
func Random(dev *vkattn.Device, p *golden.Problem, types [3]vkattn.DType) (string, bool) {
	res, err := Run(dev, p, types)
	if err != nil {
		return "device error: " + err.Error(), false
	}
	ref, err := reference.Attention(p.Q, p.Q4, p.K, p.K4, p.V, p.V4, p.Opts)
	if err != nil {
		return "reference: " + err.Error(), false
	}
	chk := res.Check(ref, p.Q, p.K, p.V, p.Opts.Scale)
	return fmt.Sprintf("%s; %s", res.Plan.Kernel.Variant, chk), chk.OK()
}
