package main

import (
	"strings"
	"testing"
)

// Checks the CLI tests share, besides main_test.go's cli and checkRefused.

// mentions checks that out (what names it in errors) holds every want.
func mentions(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}

// refusal is a command line that must fail with exit code, saying want
// on stderr.
type refusal struct {
	name string
	args []string
	code int
	want string
}

// checkRefusals runs each refusal of command cmd as a subtest (see
// checkRefused: nothing may be written to output).
func checkRefusals(t *testing.T, cmd, output string, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			checkRefused(t, append([]string{cmd}, c.args...), c.code, c.want, output)
		})
	}
}
