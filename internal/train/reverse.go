// Package train trains a small attention model on the device with
// vkattn's backward pass: the example that the package docs and vkattn
// demo run. Its code is meant to be read as well as run.
package train

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
)

// Config sizes the reversal task and its training.
type Config struct {
	N     int     // sequence length, and the number of distinct tokens
	D     int     // width of the learned query and key vectors
	Batch int     // sequences per step
	Steps int     // Adam steps
	LR    float64 // Adam's learning rate
	Seed  uint64
}

// DefaultConfig trains in about a second on lavapipe.
var DefaultConfig = Config{N: 8, D: 16, Batch: 16, Steps: 150, LR: 0.05, Seed: 1}

// Result is what training reached.
type Result struct {
	Loss      float64 // mean squared error of the last step
	Alignment []int   // per query position, the key position it weighs most
}

// Reverse learns to reverse a sequence with attention alone. The values
// are the tokens, one-hot rows of V (new random sequences every step);
// the model's parameters are a query vector per output position and a
// key vector per input position, shared by every sequence. Position t
// must learn to attend to position N-1-t: an alignment, since the tokens
// carry no position and change every step. The loss is the mean squared
// error of O against the reversed tokens; its gradient dO goes through
// Device.AttentionBackward to dQ and dK, summed over the batch, and Adam
// updates the vectors on the host. report, if not nil, gets each step's
// loss.
func Reverse(dev *vkattn.Device, cfg Config, report func(step int, loss float64)) (*Result, error) {
	n, d, batch := cfg.N, cfg.D, cfg.Batch
	r := rand.New(rand.NewPCG(cfg.Seed, 0x7265))
	params := random.Normal(r, 2*n*d) // queries, then keys
	for i := range params {
		params[i] *= 0.5
	}
	opt := newAdam(len(params), cfg.LR)

	qShape, vShape := []int{batch, 1, n, d}, []int{batch, 1, n, n}
	var ts []*vkattn.Tensor
	defer func() {
		for _, t := range ts {
			t.Close()
		}
	}()
	for _, s := range [][]int{qShape, qShape, vShape, vShape} {
		t, err := dev.Upload(s, make([]float32, s[0]*s[1]*s[2]*s[3]))
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	q, k, v, dO := ts[0], ts[1], ts[2], ts[3]
	res := &Result{}
	for step := 0; step < cfg.Steps; step++ {
		// Every sequence reads the same parameters.
		for i, t := range []*vkattn.Tensor{q, k} {
			if err := t.Write(repeat(params[i*n*d:(i+1)*n*d], batch)); err != nil {
				return nil, err
			}
		}
		tokens, want := randomSequences(r, batch, n)
		if err := v.Write(tokens); err != nil {
			return nil, err
		}
		out, err := dev.Attention(q, k, v, vkattn.Options{})
		if err != nil {
			return nil, err
		}
		o, err := out.O.Download()
		out.Close()
		if err != nil {
			return nil, err
		}
		// Mean squared error and its gradient with respect to O.
		grad := make([]float32, len(o))
		res.Loss = 0
		for i := range o {
			e := float64(o[i]) - float64(want[i])
			res.Loss += e * e / float64(len(o))
			grad[i] = float32(2 * e / float64(len(o)))
		}
		if report != nil {
			report(step, res.Loss)
		}
		if err := dO.Write(grad); err != nil {
			return nil, err
		}
		g, err := dev.AttentionBackward(q, k, v, dO, vkattn.Options{})
		if err != nil {
			return nil, err
		}
		dq, err := g.DQ.Download()
		if err == nil {
			var dk []float32
			if dk, err = g.DK.Download(); err == nil {
				opt.step(params, append(sumBatch(dq, batch), sumBatch(dk, batch)...))
			}
		}
		g.Close()
		if err != nil {
			return nil, err
		}
	}
	res.Alignment = alignment(params, n, d)
	return res, nil
}

// repeat is x copied n times.
func repeat(x []float32, n int) []float32 {
	out := make([]float32, 0, n*len(x))
	for i := 0; i < n; i++ {
		out = append(out, x...)
	}
	return out
}

// sumBatch sums x, batch equal-sized blocks, block by block.
func sumBatch(x []float32, batch int) []float32 {
	per := len(x) / batch
	out := make([]float32, per)
	for b := 0; b < batch; b++ {
		for i := range out {
			out[i] += x[b*per+i]
		}
	}
	return out
}

// randomSequences are batch sequences of n random tokens as one-hot rows
// (batch, 1, n, n), and the same sequences reversed.
func randomSequences(r *rand.Rand, batch, n int) (tokens, reversed []float32) {
	tokens, reversed = make([]float32, batch*n*n), make([]float32, batch*n*n)
	for b := 0; b < batch; b++ {
		for t := 0; t < n; t++ {
			tok := r.IntN(n)
			tokens[(b*n+t)*n+tok] = 1
			reversed[(b*n+n-1-t)*n+tok] = 1
		}
	}
	return tokens, reversed
}

// alignment is, per query position, the key position of the largest score.
func alignment(params []float32, n, d int) []int {
	out := make([]int, n)
	for t := 0; t < n; t++ {
		best := math.Inf(-1)
		for j := 0; j < n; j++ {
			s := 0.0
			for i := 0; i < d; i++ {
				s += float64(params[t*d+i]) * float64(params[(n+j)*d+i])
			}
			if s > best {
				best, out[t] = s, j
			}
		}
	}
	return out
}

// adam is Adam (Kingma and Ba) with the usual betas.
type adam struct {
	lr     float64
	m, v   []float64
	rounds int
}

func newAdam(n int, lr float64) *adam {
	return &adam{lr: lr, m: make([]float64, n), v: make([]float64, n)}
}

func (a *adam) step(params, grads []float32) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	if len(grads) != len(params) {
		panic(fmt.Sprintf("train: %d gradients for %d parameters", len(grads), len(params)))
	}
	a.rounds++
	c1, c2 := 1-math.Pow(b1, float64(a.rounds)), 1-math.Pow(b2, float64(a.rounds))
	for i, g := range grads {
		g := float64(g)
		a.m[i] = b1*a.m[i] + (1-b1)*g
		a.v[i] = b2*a.v[i] + (1-b2)*g*g
		params[i] -= float32(a.lr * (a.m[i] / c1) / (math.Sqrt(a.v[i]/c2) + eps))
	}
}
