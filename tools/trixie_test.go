// Package tools holds the project's scripts; its tests run them.
package tools

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrixieMirrorFromAptSources: tools/trixie.sh takes the Debian mirror
// from the machine's apt sources (one-line and deb822 files, as apt-config
// names them), skipping the security archive, other distributions,
// disabled stanzas and source-only entries; without one it fails saying
// to set VKATTN_DEBIAN_MIRROR, which overrides the sources. It says
// which.
func TestTrixieMirrorFromAptSources(t *testing.T) {
	if _, err := exec.LookPath("apt-config"); err != nil {
		t.Skip("no apt-config: the apt sources cannot be redirected to the test's")
	}
	for _, c := range []struct {
		name    string
		list    string            // sources.list
		parts   map[string]string // sources.list.d
		env     string            // VKATTN_DEBIAN_MIRROR
		want    string
		wantMsg string
	}{
		{name: "deb822, security first",
			parts: map[string]string{"debian.sources": `Types: deb
# http://snapshot.example.org/archive/debian-security/20250520T000000Z
URIs: http://security.example.org/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
URIs: https://mirror.example.org/debian/
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
			want: "https://mirror.example.org/debian", wantMsg: "debian.sources"},
		{name: "one-line, options and other repositories",
			list: `# deb http://commented.example.org/debian bookworm main
deb-src http://src.example.org/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] https://packages.example.com/apt stable-tools main
deb http://ubuntu.example.org/ubuntu jammy main
deb [ arch=amd64 ] http://ftp.example.de/debian/ trixie main
`,
			want: "http://ftp.example.de/debian", wantMsg: "sources.list"},
		{name: "disabled stanza, continuation lines",
			parts: map[string]string{"a.sources": `Types: deb
URIs: http://disabled.example.org/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs:
 http://cont.example.org/debian
Suites:
 bookworm-backports
Components: main
`},
			want: "http://cont.example.org/debian", wantMsg: "a.sources"},
		{name: "no Debian mirror",
			list: "deb http://ubuntu.example.org/ubuntu noble main\n",
			want: "", wantMsg: "set it to a Debian mirror"},
		{name: "the variable first",
			list: "deb http://ftp.example.de/debian bookworm main\n",
			env:  "http://local.example.org/debian",
			want: "http://local.example.org/debian", wantMsg: "VKATTN_DEBIAN_MIRROR"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			parts := filepath.Join(dir, "sources.list.d")
			if err := os.Mkdir(parts, 0o755); err != nil {
				t.Fatal(err)
			}
			list := filepath.Join(dir, "sources.list")
			if c.list != "" {
				if err := os.WriteFile(list, []byte(c.list), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for name, text := range c.parts {
				if err := os.WriteFile(filepath.Join(parts, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			conf := filepath.Join(dir, "apt.conf")
			if err := os.WriteFile(conf, []byte(`Dir::Etc::SourceList "`+list+`";`+"\n"+`Dir::Etc::SourceParts "`+parts+`/";`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "trixie.sh", "mirror")
			cmd.Env = append(os.Environ(), "APT_CONFIG="+conf, "VKATTN_DEBIAN_MIRROR="+c.env)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if c.want == "" {
				// No mirror known: the script stops and says what to set.
				if err == nil || !strings.Contains(stderr.String(), c.wantMsg) || !strings.Contains(stderr.String(), "VKATTN_DEBIAN_MIRROR") {
					t.Errorf("with no mirror: %v, %q; want a failure saying to set VKATTN_DEBIAN_MIRROR", err, stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("trixie.sh mirror: %v\n%s", err, stderr.String())
			}
			if got := strings.TrimSpace(string(out)); got != c.want {
				t.Errorf("mirror %q, want %q (stderr: %s)", got, c.want, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), c.wantMsg) {
				t.Errorf("message %q does not say %q from %q", stderr.String(), c.want, c.wantMsg)
			}
		})
	}
}
