package vkattn_test

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/devtest"
)

// A call with more work than one submission carries (a fraction of a
// second on lavapipe, a small fraction of Windows' two-second limit on a
// GPU) runs as chunks of query rows submitted one after another, and a
// cancelled context stops it between them: a signal never waits for the
// rest of a long call.
func TestLongCallStopsBetweenSubmissions(t *testing.T) {
	r := rand.New(rand.NewSource(199))
	p := devtest.NewProblem(r, 1, 8, 8, 8192, 8192, 64, 64)
	q, k, v := p.Inputs(t, devtest.Dev)
	defer q.Close()
	defer k.Close()
	defer v.Close()
	call, err := devtest.Dev.Prepare(q, k, v, p.Opts)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	parts := call.Output().Plan.Kernel.Chunks
	if devtest.Dev.Info().Type != core.DeviceCPU {
		t.Skipf("%s runs this call in %d submission(s)", devtest.Dev.Info().Name, parts)
	}
	if parts < 4 {
		t.Fatalf("%d chunks, want a call of several submissions: %v", parts, call.Output().Plan)
	}
	before := devtest.Dev.Stats()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for devtest.Dev.Stats().Since(before).Submits == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := call.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if n := devtest.Dev.Stats().Since(before).Submits; n >= parts {
		t.Errorf("cancelled after the first submission, the call made %d of its %d", n, parts)
	}
}
