//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vkattn/vkattn/internal/testutil"
)

func (c *cliChild) signal(s syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(s); err != nil {
		c.t.Fatal(err)
	}
}

// Issue 9: a signal while run writes its output left the complete
// temporary file beside the target. Every stop signal removes it, exits
// with 128 + the signal's number, and the target is never written.
func TestSignalRemovesTemporaryOutput(t *testing.T) {
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			o := filepath.Join(dir, "o.npy")
			c := startCLI(t, []string{"VKATTN_TEST_PAUSE_STAGED=1"}, "run", "-q", q, "-k", k, "-v", v, "-o", o, "--lse", filepath.Join(dir, "lse.npy"))
			// Paused with O staged, its temporary file complete.
			s := c.waitStderr("\n", 60*time.Second)
			tmp, ok := strings.CutPrefix(strings.TrimSpace(s), "staged ")
			if !ok {
				t.Fatalf("stderr: %s", s)
			}
			if _, err := os.Stat(tmp); err != nil || !strings.HasPrefix(filepath.Base(tmp), ".o.npy.tmp") {
				t.Fatalf("staged %s: %v", tmp, err)
			}
			c.signal(sig)
			code, took := c.wait(10 * time.Second)
			if want := 128 + int(sig); code != want {
				t.Errorf("exit %d, want %d", code, want)
			}
			if took > 2*time.Second {
				t.Errorf("took %v to exit", took)
			}
			if tmps := tempFiles(dir); len(tmps) > 0 {
				t.Errorf("temporary files left behind: %v", tmps)
			}
			if _, err := os.Stat(o); err == nil {
				t.Errorf("%s written", o)
			}
		})
	}
}

// Issue 10: a second signal was ignored. The first one stops the
// interruptible work and says so; the second exits at once, however the
// work is stuck: here decode writing its output into a FIFO no one reads.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	// 256 KiB of output: more than a pipe holds, so the write blocks.
	const T, d = 1024, 64
	x := make([][]float32, T)
	for i := range x {
		x[i] = make([]float32, d)
		x[i][i%d] = 1
	}
	q := save(t, dir, "x.npy", x)
	fifo := filepath.Join(dir, "o.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCLI(t, nil, "decode", "-q", q, "-k", q, "-v", q, "--prefill", "1024", "-o", fifo)
	// Opening the read end returns once decode opens the write end: it
	// has computed and is writing, under its interruptible context.
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	select {
	case f := <-opened:
		if f != nil {
			defer f.Close()
		}
	case <-c.exited:
		t.Fatalf("exited (%v) without opening the FIFO:\n%s", c.err, c.errText())
	case <-time.After(60 * time.Second):
		t.Fatalf("decode did not open the FIFO:\n%s", c.errText())
	}
	c.signal(syscall.SIGINT)
	c.waitStderr("vkattn decode: interrupt: stopping; a second signal quits at once", 10*time.Second)
	select {
	case <-c.exited:
		t.Fatalf("the first signal ended the process (%v); want it to stop its work", c.err)
	case <-time.After(200 * time.Millisecond):
	}
	c.signal(syscall.SIGINT)
	// Without the second signal's exit the process stays blocked on the
	// FIFO nobody reads (past the 10 s wait); "at once" allows for the
	// exit of a process on a machine busy with the rest of make test
	// (1.1 s seen on two loaded cores).
	code, took := c.wait(10 * time.Second)
	if code != 130 || took > 5*time.Second {
		t.Errorf("second signal: exit %d after %v; want 130 at once", code, took)
	}
	if tmps := tempFiles(dir); len(tmps) > 0 {
		t.Errorf("temporary files left behind: %v", tmps)
	}
}

// Issue 10: bench stops at the next call after a signal, reports what it
// measured without waiting for the call in flight, and exits 130.
func TestBenchSignalStopsPromptly(t *testing.T) {
	// Calls of a few hundred milliseconds on lavapipe, far more than run
	// in the test; the bar on stderr (a pipe, so not hidden) says when the
	// first has finished.
	c := startCLI(t, nil, "bench", "--shape", "1,1,1,4096,8192,64", "--reps", "1000000")
	c.waitStderrMatch(regexp.MustCompile(`\([1-9][0-9]*/1000001\)`), 120*time.Second)
	start := time.Now()
	c.signal(syscall.SIGINT)
	c.waitStderr("a second signal quits at once", 5*time.Second)
	c.waitStderr("vkattn bench: interrupted after 0 of 1 shapes", 5*time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("stopping took %v", took)
	}
	select {
	case <-c.exited:
	case <-time.After(500 * time.Millisecond):
		c.signal(syscall.SIGINT) // still waiting for the call in flight: end it
	}
	if code, _ := c.wait(5 * time.Second); code != 130 {
		t.Errorf("exit %d, want 130", code)
	}
	mentions(t, "stderr", c.errText(), "vkattn bench: interrupt: stopping")
	mentions(t, "stdout", c.stdout.String(), "no results")
}

// tune likewise: it stops at the next call, prints what it measured,
// saves nothing and exits 130.
func TestTuneSignalStopsPromptly(t *testing.T) {
	c := startCLI(t, nil, "tune", "--d", "16", "--len", "64", "--reps", "1000000", "--dry-run")
	c.waitStderrMatch(regexp.MustCompile(`\([1-9][0-9]*/[0-9]+\)`), 120*time.Second)
	start := time.Now()
	c.signal(syscall.SIGTERM)
	code, took := c.wait(10 * time.Second)
	if code != 128+int(syscall.SIGTERM) || took > 2*time.Second {
		t.Errorf("exit %d after %v; want %d within a second or so", code, time.Since(start), 128+int(syscall.SIGTERM))
	}
	mentions(t, "stderr", c.errText(), "vkattn tune: terminated: stopping", "vkattn tune: interrupted: nothing saved")
	mentions(t, "stdout", c.stdout.String(), "device: ", "rows ")
}

// Issue 12: -o /dev/stdout into a pipe failed after computing; a pipe or a
// character device is written in place, and the summary moves to stderr.
func TestRunWritesToAPipe(t *testing.T) {
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	c := startCLI(t, nil, "run", "-q", q, "-k", k, "-v", v, "-o", "/dev/stdout", "--check")
	if code, _ := c.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, c.errText())
	}
	out := filepath.Join(dir, "piped.npy")
	os.WriteFile(out, c.stdout.Bytes(), 0o644)
	testutil.Near(t, "O through the pipe", load(t, out).F32, []float64{1.6044, 1.5933}, 1e-4)
	mentions(t, "stderr", c.errText(), "wrote O (1, 2) to /dev/stdout", "check vs float64 reference")

	// A FIFO likewise, and /dev/null; no temporary file anywhere.
	fifo := filepath.Join(dir, "fifo.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	got := readFIFO(t, fifo)
	c = startCLI(t, nil, "run", "-q", q, "-k", k, "-v", v, "-o", fifo, "--lse", "/dev/null")
	if code, _ := c.wait(60 * time.Second); code != 0 {
		t.Fatalf("FIFO: exit %d:\n%s", code, c.errText())
	}
	select {
	case b := <-got:
		os.WriteFile(out, b, 0o644)
		testutil.Near(t, "O through the FIFO", load(t, out).F32, []float64{1.6044, 1.5933}, 1e-4)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came through the FIFO")
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced (%v)", err)
	}
	mentions(t, "stdout", c.stdout.String(), "wrote O (1, 2) to "+fifo, "wrote LSE (1,) to /dev/null")
	if tmps := tempFiles(dir); len(tmps) > 0 {
		t.Errorf("temporary files: %v", tmps)
	}

	// The JSON summary cannot move off stdout; two outputs into one pipe
	// would interleave.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "/dev/stdout", "--json"}, "--json prints to standard output, which an output file also writes"},
		{[]string{"-o", "/dev/stdout", "--lse", "/dev/stdout"}, "-o and --lse both write /dev/stdout"},
	} {
		argv, _ := json.Marshal(append([]string{"run", "-q", q, "-k", k, "-v", v}, c.args...))
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "VKATTN_TEST_CLI_ARGS="+string(argv))
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitUsage || !strings.Contains(se.String(), c.want) || so.Len() > 0 {
			t.Errorf("%v: %v, stdout %q, stderr %q; want exit 2 saying %q", c.args, err, so.String(), se.String(), c.want)
		}
	}
}
