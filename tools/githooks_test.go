package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommitMsgHook: tools/githooks/commit-msg passes a subject of 72
// characters (multi-byte ones counted as one) with a long body, and
// refuses one of 73, saying how long it is; comment lines before the
// subject do not count.
func TestCommitMsgHook(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		msg  string
		pass bool
	}{
		{strings.Repeat("a", 72) + "\n\n" + strings.Repeat("b", 200) + "\n", true},
		{"# a comment git strips\n" + strings.Repeat("é", 72) + "\n", true},
		{strings.Repeat("a", 73) + "\n", false},
	} {
		path := filepath.Join(dir, "COMMIT_EDITMSG")
		if err := os.WriteFile(path, []byte(c.msg), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("githooks/commit-msg", path).CombinedOutput()
		if pass := err == nil; pass != c.pass {
			t.Errorf("message %q: passed %v, want %v (%s)", c.msg[:20], pass, c.pass, out)
		}
		if !c.pass && !strings.Contains(string(out), "the subject is 73 characters, at most 72") {
			t.Errorf("refusal says %q", out)
		}
	}
}
