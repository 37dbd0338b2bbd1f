package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
	"time"
)

// inChild runs the calling test again in a fresh process and reports
// whether this is that process: the parent returns false after checking
// the child's result. The host's instance has no debug callback of its
// own, so the validation layer (on under VKATTN_VALIDATION=1, which env
// may set) prints what it finds on standard output; the parent fails the
// test on any such line.
func inChild(t *testing.T, env ...string) bool {
	t.Helper()
	if os.Getenv("VKATTN_SUBPROCESS") == t.Name() {
		return true
	}
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "VKATTN_SUBPROCESS="+t.Name()), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("%s in a child process: %v\n%s", t.Name(), err, out)
	}
	for _, msg := range []string{"Validation Error", "Validation Warning", "Validation Performance Warning"} {
		if bytes.Contains(out, []byte(msg)) {
			t.Fatalf("the validation layer reported in the child process:\n%s", out)
		}
	}
	if testing.Verbose() {
		t.Logf("child process:\n%s", out)
	}
	return false
}
