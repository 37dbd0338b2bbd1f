package vkattn_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/internal/resident"
	"github.com/vkattn/vkattn/nn"
)

// inSubprocess runs the calling test's body in a child process, so that a
// crash (a SIGSEGV in the driver) fails the test instead of killing the
// suite. It returns true in the child, which then runs the body; the
// child's TestMain also fails it on validation messages and live objects.
func inSubprocess(t *testing.T) bool {
	t.Helper()
	if os.Getenv("VKATTN_SUBPROCESS") == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "VKATTN_SUBPROCESS="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("%s in a subprocess: %v\n%s", t.Name(), err, out)
	}
	return false
}

// uploadProblem puts p's Q, K and V on d.
func uploadProblem(t *testing.T, d *vkattn.Device, p *devtest.Problem) (q, k, v *vkattn.Tensor) {
	t.Helper()
	return devtest.MustUpload(t, d, p.QS[:], p.Q), devtest.MustUpload(t, d, p.KS[:], p.K), devtest.MustUpload(t, d, p.VS[:], p.V)
}

// slowProblem is a call that runs long enough on lavapipe (about half a
// second) to be cancelled while it is on the device.
func slowProblem() *devtest.Problem {
	return devtest.NewProblem(rand.New(rand.NewSource(11)), 1, 2, 2, 4096, 4096, 64, 64)
}

// TestCancelledCallsLeaveTheDeviceUsable: a done context submits nothing; a
// deadline returns promptly while the work goes on in the background; the
// inputs of work still in flight may be closed at once; the device then
// computes correct results and closes with nothing left alive.
func TestCancelledCallsLeaveTheDeviceUsable(t *testing.T) {
	if !inSubprocess(t) {
		return
	}
	d, before := devtest.OpenOwnDevice(t)
	slow := slowProblem()
	q, k, v := uploadProblem(t, d, slow)

	// A done context: nothing is prepared, allocated or submitted.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	allocs := d.Stats().Allocations
	if _, err := d.AttentionContext(ctx, q, k, v, vkattn.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("AttentionContext with a cancelled context: %v, want context.Canceled", err)
	}
	if n := d.Stats().Allocations; n != allocs {
		t.Errorf("a cancelled call allocated %d buffers, want none", n-allocs)
	}

	// The full run's time, which also compiles the variant.
	call, err := d.Prepare(q, k, v, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := call.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	start = time.Now()
	if _, err := call.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	full = min(full, time.Since(start))
	t.Logf("the slow call takes %v", full)

	// A deadline a fifth into the work returns well before the work ends.
	deadline := full / 5
	ctx, cancel = context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start = time.Now()
	_, err = d.AttentionContext(ctx, q, k, v, vkattn.Options{})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AttentionContext past its deadline: %v, want context.DeadlineExceeded", err)
	}
	t.Logf("with a %v deadline AttentionContext returned after %v", deadline, took)
	if limit := deadline + (full-deadline)/2; took > limit {
		t.Errorf("AttentionContext with a %v deadline returned after %v; the work takes %v (want < %v)", deadline, took, full, limit)
	}

	// The prepared call cancelled mid-run, then its inputs closed while its
	// work is still on the device (this crashed the process before).
	ctx, cancel = context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if _, err := call.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call.Run past its deadline: %v, want context.DeadlineExceeded", err)
	}
	q.Close()
	k.Close()
	v.Close()
	if _, err := call.Run(context.Background()); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("Call.Run after its inputs were closed: %v, want ErrClosed", err)
	}
	call.Close()

	// The device still computes correct results.
	devtest.CheckAgainstReference(t, d, devtest.NewProblem(rand.New(rand.NewSource(12)), 2, 2, 1, 5, 7, 16, 8))
	devtest.CloseOwnDevice(t, d, before)
}

// TestCloseAfterDeviceClose: calls and layers closed after their device (never
// run, finished, or cancelled) are no-ops, runs of them return ErrClosed,
// and a device closed with calls still open frees their objects too.
func TestCloseAfterDeviceClose(t *testing.T) {
	if !inSubprocess(t) {
		return
	}
	d, before := devtest.OpenOwnDevice(t)
	small := devtest.NewProblem(rand.New(rand.NewSource(13)), 1, 2, 2, 4, 6, 16, 16)
	q, k, v := uploadProblem(t, d, small)
	prepare := func() *vkattn.Call {
		c, err := d.Prepare(q, k, v, vkattn.Options{WantLSE: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	neverRun, finished := prepare(), prepare()
	if _, err := finished.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	slow := slowProblem()
	sq, sk, sv := uploadProblem(t, d, slow)
	cancelled, err := d.Prepare(sq, sk, sv, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := cancelled.Run(ctx); err == nil {
		t.Log("the slow call finished inside 20 ms: the cancelled case ran as finished")
	}

	layer, err := nn.NewMHA(d, devtest.RandomMHA(rand.New(rand.NewSource(14)), 8, 8, 8, true))
	if err != nil {
		t.Fatal(err)
	}
	x, err := d.Upload([]int{1, 3, 8}, devtest.RandomValues(rand.New(rand.NewSource(15)), 24))
	if err != nil {
		t.Fatal(err)
	}
	mcall, err := layer.Prepare(x, nil, nil, nn.MHAOptions{Heads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mcall.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Close with every call still open frees their objects.
	devtest.CloseOwnDevice(t, d, before)
	for name, c := range map[string]*vkattn.Call{"never run": neverRun, "finished": finished, "cancelled": cancelled} {
		if _, err := c.Run(context.Background()); !errors.Is(err, vkattn.ErrClosed) {
			t.Errorf("Run of a %s call after Device.Close: %v, want ErrClosed", name, err)
		}
		c.Close()
		c.Close()
	}
	if _, err := mcall.Run(context.Background()); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("MHACall.Run after Device.Close: %v, want ErrClosed", err)
	}
	mcall.Close()
	layer.Close()
	for _, tt := range []*vkattn.Tensor{q, k, v, sq, sk, sv, x} {
		tt.Close()
	}
	if _, err := d.Upload([]int{2, 2}, []float32{1, 2, 3, 4}); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("Upload after Device.Close: %v, want ErrClosed", err)
	}
	if n := vkattn.LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after closing everything, want %d", n, before)
	}
}

// TestSoakManyCalls makes thousands of one-shot and prepared calls on a
// device of its own: resident memory stays flat (no C or Vulkan memory
// leaks per call) and nothing is alive after Close.
func TestSoakManyCalls(t *testing.T) {
	d, before := devtest.OpenOwnDevice(t)
	p := devtest.NewProblem(rand.New(rand.NewSource(31)), 1, 2, 1, 3, 5, 8, 8)
	want := devtest.RunReference(t, p)
	q, k, v := uploadProblem(t, d, p)
	prepared, err := d.Prepare(q, k, v, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	round := func(n int) {
		for i := 0; i < n; i++ {
			out, err := d.Attention(q, k, v, vkattn.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if i%100 == 0 { // checking every result would dominate the time
				got := devtest.Download(t, out.O)
				devtest.Compare(t, "O", got, want.O)
			}
			out.Close()
			if _, err := prepared.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	round(300) // warm-up: the driver's and allocator's pools settle
	start, err := resident.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	round(n)
	end, err := resident.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	grew := end - start
	t.Logf("resident memory grew %d bytes over %d one-shot and %d prepared calls", grew, n, n)
	// The validation layer keeps ~80 bytes of its own per call.
	if grew > 4<<20 {
		t.Errorf("resident memory grew %d bytes over %d calls (%d per call)", grew, n, grew/n)
	}
	prepared.Close()
	q.Close()
	k.Close()
	v.Close()
	devtest.CloseOwnDevice(t, d, before)
}

// TestWrongDeviceTellsDevicesApart: a tensor of another device opened on
// the same GPU is refused with a message that tells the two apart.
func TestWrongDeviceTellsDevicesApart(t *testing.T) {
	p := devtest.NewProblem(rand.New(rand.NewSource(41)), 1, 1, 1, 2, 2, 4, 4)
	q, k, v := uploadProblem(t, devtest.Dev, p)
	defer q.Close()
	defer k.Close()
	defer v.Close()
	other, err := devtest.StorageDev.Upload(p.KS[:], p.K)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = devtest.Dev.Attention(q, other, v, vkattn.Options{})
	if !errors.Is(err, vkattn.ErrDevice) {
		t.Fatalf("K of another device: %v, want ErrDevice", err)
	}
	msg := err.Error()
	i := strings.Index(msg, "device #")
	j := strings.LastIndex(msg, "device #")
	if i < 0 || i == j || msg[i:i+10] == msg[j:j+10] {
		t.Errorf("the message does not tell the two devices apart: %q", msg)
	}
}
