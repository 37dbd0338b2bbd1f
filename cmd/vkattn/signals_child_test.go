package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// cliChild is the CLI running in a child process (TestMain's
// VKATTN_TEST_CLI_ARGS), its stderr collected as it comes.
type cliChild struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout bytes.Buffer
	mu     sync.Mutex
	stderr strings.Builder
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startCLI starts `vkattn args...` in a child process with env added.
func startCLI(t *testing.T, env []string, args ...string) *cliChild {
	t.Helper()
	argv, _ := json.Marshal(args)
	c := &cliChild{t: t, exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(append(os.Environ(), "VKATTN_TEST_CLI_ARGS="+string(argv)), env...)
	c.cmd.Stdout = &c.stdout
	errPipe, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := bufio.NewReader(errPipe)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			c.mu.Lock()
			c.stderr.Write(buf[:n])
			c.mu.Unlock()
			if err != nil {
				break
			}
		}
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			c.cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

func (c *cliChild) errText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// waitStderr polls stderr until it holds want, and returns it.
func (c *cliChild) waitStderr(want string, timeout time.Duration) string {
	c.t.Helper()
	return c.waitStderrMatch(regexp.MustCompile(regexp.QuoteMeta(want)), timeout)
}

// waitStderrMatch polls stderr until want matches it, and returns it.
func (c *cliChild) waitStderrMatch(want *regexp.Regexp, timeout time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := c.errText()
		if want.MatchString(s) {
			return s
		}
		select {
		case <-c.exited:
			c.t.Fatalf("exited (%v) before stderr said %q:\n%.3000s", c.err, want, c.errText())
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("stderr does not say %q after %v:\n%.3000s", want, timeout, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wait waits at most timeout for the child to exit and returns its exit
// status and how long it took.
func (c *cliChild) wait(timeout time.Duration) (int, time.Duration) {
	c.t.Helper()
	start := time.Now()
	select {
	case <-c.exited:
	case <-time.After(timeout):
		c.t.Fatalf("still running %v later; stderr:\n%.3000s", timeout, c.errText())
	}
	var exit *exec.ExitError
	switch {
	case c.err == nil:
		return 0, time.Since(start)
	case errors.As(c.err, &exit):
		return exit.ExitCode(), time.Since(start)
	}
	c.t.Fatal(c.err)
	return 0, 0
}

// tempFiles lists the hidden temporary outputs in dir.
func tempFiles(dir string) []string {
	var tmps []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			tmps = append(tmps, e.Name())
		}
	}
	return tmps
}
