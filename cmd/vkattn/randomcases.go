package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/reference"
)

// normalArray is an array of standard normal values of the given shape.
func normalArray(rng *rand.Rand, shape ...int) *npyArray {
	n := 1
	for _, x := range shape {
		n *= x
	}
	a := &npyArray{Shape: shape, F32: make([]float32, n)}
	for i := range a.F32 {
		a.F32[i] = float32(rng.NormFloat64())
	}
	return a
}

// randomCase is case i of verify --random: odd shapes, d_k != d_v up to
// 256, grouped-query heads, decode shapes (one query row, many keys),
// every mask kind, per-item lengths, half inputs, LSE and weights. It
// returns the problem and a name saying what it holds.
func randomCase(rng *rand.Rand, i int) (*problem, string, error) {
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
	p := &problem{q: normalArray(rng, b, h, l, dk), k: normalArray(rng, b, hkv, s, dk), v: normalArray(rng, b, hkv, s, dv)}
	p.q4, p.k4, p.v4 = [4]int{b, h, l, dk}, [4]int{b, hkv, s, dk}, [4]int{b, hkv, s, dv}
	name := fmt.Sprintf("random%03d B%d H%d Hkv%d L%d S%d dk%d dv%d", i, b, h, hkv, l, s, dk, dv)
	if rng.IntN(2) == 0 {
		p.opts.Causal = []vkattn.Causal{vkattn.CausalTopLeft, vkattn.CausalBottomRight}[rng.IntN(2)]
		name += " causal-" + p.opts.Causal.String()
	}
	if rng.IntN(2) == 0 {
		m := &vkattn.Mask{Shape: vkattn.MaskShape{b, 1, l, s}, Values: make([]float32, b*l*s)}
		for j := range m.Values {
			m.Values[j] = float32(3 * (rng.Float64() - 0.5))
			if rng.IntN(5) == 0 {
				m.Values[j] = float32(math.Inf(-1))
			}
		}
		p.opts.Mask = m
		name += " additive"
	}
	if rng.IntN(3) == 0 {
		bm := vkattn.BoolMask{Shape: vkattn.MaskShape{1, h, 1, s}, Values: make([]bool, h*s), Meaning: vkattn.TrueAllows}
		for j := range bm.Values {
			bm.Values[j] = rng.IntN(4) != 0
		}
		p.opts.BoolMasks = []vkattn.BoolMask{bm}
		name += " bool"
	}
	if rng.IntN(2) == 0 {
		p.opts.KeyLengths, p.opts.QueryLengths = make([]int, b), make([]int, b)
		for j := range p.opts.KeyLengths {
			p.opts.KeyLengths[j], p.opts.QueryLengths[j] = rng.IntN(s+1), rng.IntN(l+1)
		}
		name += fmt.Sprintf(" lengths%v/%v", p.opts.KeyLengths, p.opts.QueryLengths)
	}
	types := [][3]vkattn.DType{{}, {}, {vkattn.Float32, vkattn.Float16, vkattn.Float16}, {vkattn.BFloat16, vkattn.BFloat16, vkattn.BFloat16}}[i%4]
	for j, a := range []*npyArray{p.q, p.k, p.v} {
		if err := a.storeAs(types[j]); err != nil {
			return nil, "", err
		}
	}
	if types != [3]vkattn.DType{} {
		name += fmt.Sprintf(" %v/%v/%v", types[0], types[1], types[2])
	}
	p.opts.WantLSE = rng.IntN(2) == 0
	p.opts.WantWeights = l > 1 && rng.IntN(3) == 0
	return p, name, nil
}

// verifyRandom runs n random cases from seed against the float64 reference
// (on the values as stored: rounded for half inputs), printing one line
// each and counting them in count.
func verifyRandom(w io.Writer, dev *vkattn.Device, n int, seed uint64, count *tally) {
	rng := rand.New(rand.NewPCG(seed, 0x72616e64)) // "rand"
	for i := 0; i < n; i++ {
		p, name, err := randomCase(rng, i)
		line, ok := "", false
		if err == nil {
			line, ok = checkRandom(dev, p)
		} else {
			line = err.Error()
		}
		fmt.Fprintf(w, "%s: %s  %s\n", name, line, count.add(ok))
	}
}

// checkRandom runs one random case and compares every output with the
// reference.
func checkRandom(dev *vkattn.Device, p *problem) (string, bool) {
	res, err := attend(dev, p)
	if err != nil {
		return "device error: " + err.Error(), false
	}
	ref, err := reference.Attention(p.q.F32, p.q4, p.k.F32, p.k4, p.v.F32, p.v4, p.opts)
	if err != nil {
		return "reference: " + err.Error(), false
	}
	chk := checkAttention(res, ref)
	return fmt.Sprintf("%s; %s", res.plan.Kernel.Variant, chk), chk.OK()
}
