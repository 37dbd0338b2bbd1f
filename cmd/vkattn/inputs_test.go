//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run the CLI in a child process (runCLIProcess), for
// inputs that could exhaust memory if a reader misbehaved.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("VKATTN_TEST_CLI_ARGS"); ok {
		// 4 GiB of address space: a reader that slurps an endless input
		// dies here, in the child, instead of taking the machine down.
		lim := syscall.Rlimit{Cur: 4 << 30, Max: 4 << 30}
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &lim); err != nil {
			os.Stderr.WriteString("setrlimit: " + err.Error())
			os.Exit(3)
		}
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			os.Stderr.WriteString("VKATTN_TEST_CLI_ARGS: " + err.Error())
			os.Exit(3)
		}
		if os.Getenv("VKATTN_TEST_PAUSE_STAGED") != "" {
			// Stop with a complete temporary output in place, for a
			// signal to find (signals_test.go).
			afterStaged = func(tmp string) {
				os.Stderr.WriteString("staged " + tmp + "\n")
				for {
					time.Sleep(time.Hour)
				}
			}
		}
		catchSignals(os.Stderr)
		os.Exit(exitStatus(run(argv, os.Stdout, os.Stderr)))
	}
	os.Exit(m.Run())
}

// runCLIProcess runs the CLI with args in a child process with bounded
// memory and time.
func runCLIProcess(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	argv, _ := json.Marshal(args)
	cmd.Env = append(os.Environ(), "VKATTN_TEST_CLI_ARGS="+string(argv))
	var e bytes.Buffer
	cmd.Stderr = &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("vkattn %v ran past 60 s; stderr:\n%.2000s", args, e.String())
	case errors.As(err, &exit):
		return e.String(), exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return e.String(), 0
}

// Issue 10: -q /dev/zero exhausted memory with a Go runtime trace; it must
// fail on the header, at once.
func TestRunEndlessInput(t *testing.T) {
	_, k, v := seed000(t, t.TempDir())
	errOut, code := runCLIProcess(t, "run", "-q", "/dev/zero", "-k", k, "-v", v)
	want := "vkattn run: /dev/zero: not a valid .npy file: missing the \\x93NUMPY magic"
	if code != exitFail || !strings.Contains(errOut, want) || strings.Contains(errOut, "goroutine") {
		t.Errorf("exit %d, want %d with %q; stderr:\n%.2000s", code, exitFail, want, errOut)
	}
}

// Issue 14a: a header dict without its closing brace showed a recovered
// "slice bounds out of range"; the message must say what is wrong.
func TestRunMalformedHeader(t *testing.T) {
	dir := t.TempDir()
	_, k, v := seed000(t, dir)
	dict := "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), \n"
	bad := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)), 0)
	bad = append(append(bad, dict...), make([]byte, 8)...)
	q := filepath.Join(dir, "bad.npy")
	os.WriteFile(q, bad, 0o644)
	checkRefused(t, []string{"run", "-q", q, "-k", k, "-v", v}, exitFail, q+": not a valid .npy file: header dict is not terminated", filepath.Join(dir, "none"))
	if _, errOut, _ := cli(t, "run", "-q", q, "-k", k, "-v", v); strings.Contains(errOut, "runtime error") {
		t.Errorf("stderr: %s", errOut)
	}
}

// float16 inputs widen to float32 on load.
func TestReadFloat16Input(t *testing.T) {
	dict := "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 3), }"
	data := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)+1), 0)
	data = append(append(data, dict...), '\n')
	for _, h := range []uint16{0x3c00, 0xc000, 0x7bff} { // 1, -2, 65504
		data = binary.LittleEndian.AppendUint16(data, h)
	}
	p := filepath.Join(t.TempDir(), "q16.npy")
	os.WriteFile(p, data, 0o644)
	a, err := readFloatInput("Q", p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Shape, []int{1, 3}) || !slices.Equal(a.F32, []float32{1, -2, 65504}) || a.DType != "<f2" {
		t.Errorf("got %+v", a)
	}
}
