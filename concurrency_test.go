package vkattn_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/parallel"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// TestConcurrentCallsOnOneDevice shares one device among 8 goroutines, as a
// Go program shares an *sql.DB: each uploads its own queries, reads K and
// V tensors shared by all, runs one-shot and prepared calls and an MHA
// layer, and checks every result against the reference; then the device
// is closed while goroutines are still calling it, which must give
// results or ErrClosed, never a crash. `make test` runs it under -race too.
func TestConcurrentCallsOnOneDevice(t *testing.T) {
	if !inSubprocess(t) {
		return
	}
	d, before := devtest.OpenOwnDevice(t)
	r := rand.New(rand.NewSource(21))
	shared := devtest.NewProblem(r, 1, 2, 2, 9, 11, 16, 8)
	_, k, v := uploadProblem(t, d, shared)
	weights := devtest.RandomMHA(r, 8, 8, 8, true)
	layer, err := nn.NewMHA(d, weights)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, rounds = 8, 4
	queries := make([][]float32, goroutines)
	for g := range queries {
		queries[g] = devtest.RandomValues(r, devtest.Size(shared.QS))
	}
	if err := parallel.Start(goroutines, func(g int) error {
		return concurrentWork(d, &mhaLayer{layer, weights}, shared, queries[g], k, v, g, rounds)
	})(); err != nil {
		t.Error(err)
	}
	layer.Close()

	// Close under load: every goroutine's calls succeed or fail with
	// ErrClosed.
	start := make(chan struct{})
	wait := parallel.Start(goroutines, func(g int) error {
		<-start
		for i := 0; ; i++ {
			err := concurrentWork(d, nil, shared, queries[g], k, v, g, 1)
			if errors.Is(err, vkattn.ErrClosed) {
				return nil
			}
			if err != nil || i == 1000 {
				return fmt.Errorf("goroutine %d while the device closed: %v", g, err)
			}
		}
	})
	close(start)
	devtest.CloseOwnDevice(t, d, before)
	if err := wait(); err != nil {
		t.Error(err)
	}
	k.Close()
	v.Close()
}

// concurrentWork is one goroutine's share: its own Q with the shared K and
// V through a one-shot call, a prepared call run twice with a Write in
// between, and (when layer is not nil) an MHA forward, all checked
// against the reference.
func concurrentWork(d *vkattn.Device, layer *mhaLayer, shared *devtest.Problem, qData []float32, k, v *vkattn.Tensor, g, rounds int) error {
	p := *shared
	p.Q = qData
	p.Opts = vkattn.Options{Causal: vkattn.CausalBottomRight}
	want, err := devtest.ReferenceOf(&p)
	if err != nil {
		return err
	}
	for i := 0; i < rounds; i++ {
		q, err := d.Upload(p.QS[:], p.Q)
		if err != nil {
			return err
		}
		out, err := d.Attention(q, k, v, p.Opts)
		if err != nil {
			q.Close()
			return err
		}
		got, err := out.O.Download()
		out.Close()
		if err != nil {
			q.Close()
			return err
		}
		if err := devtest.CloseTo(got, want); err != nil {
			q.Close()
			return fmt.Errorf("goroutine %d round %d, one-shot call: %v", g, i, err)
		}
		call, err := d.Prepare(q, k, v, p.Opts)
		if err != nil {
			q.Close()
			return err
		}
		err = runPreparedTwice(call, q, &p, want)
		call.Close()
		q.Close()
		if err != nil {
			return fmt.Errorf("goroutine %d round %d, prepared call: %w", g, i, err)
		}
		if layer != nil {
			if err := forwardChecked(d, layer, g); err != nil {
				return fmt.Errorf("goroutine %d round %d, MHA: %w", g, i, err)
			}
		}
	}
	return nil
}

// runPreparedTwice runs call, writes the negated queries into q and runs it
// again; the second output is checked against the reference of -Q.
func runPreparedTwice(call *vkattn.Call, q *vkattn.Tensor, p *devtest.Problem, want []float64) error {
	if _, err := call.Run(context.Background()); err != nil {
		return err
	}
	got, err := call.Output().O.Download()
	if err != nil {
		return err
	}
	if err := devtest.CloseTo(got, want); err != nil {
		return err
	}
	neg := *p
	neg.Q = make([]float32, len(p.Q))
	for i, x := range p.Q {
		neg.Q[i] = -x
	}
	wantNeg, err := devtest.ReferenceOf(&neg)
	if err != nil {
		return err
	}
	if err := q.Write(neg.Q); err != nil {
		return err
	}
	if _, err := call.Run(context.Background()); err != nil {
		return err
	}
	if got, err = call.Output().O.Download(); err != nil {
		return err
	}
	return devtest.CloseTo(got, wantNeg)
}

// mhaLayer is an MHA layer on the device with its host weights.
type mhaLayer struct {
	layer   *nn.MHA
	weights *nn.MHAWeights
}

// forwardChecked runs the layer on fresh input and checks it against the
// float64 MHA reference.
func forwardChecked(d *vkattn.Device, l *mhaLayer, g int) error {
	r := rand.New(rand.NewSource(int64(100 + g)))
	shape := []int{1, 3, 8}
	x := devtest.RandomValues(r, 1*3*8)
	xt, err := d.Upload(shape, x)
	if err != nil {
		return err
	}
	defer xt.Close()
	opts := nn.MHAOptions{Heads: 2}
	out, err := l.layer.Forward(xt, nil, nil, opts)
	if err != nil {
		return err
	}
	defer out.Close()
	got, err := out.Out.Download()
	if err != nil {
		return err
	}
	want, err := reference.MultiHeadAttention(x, shape, nil, nil, nil, nil, l.weights, opts)
	if err != nil {
		return err
	}
	return devtest.CloseTo(got, want.Out)
}
