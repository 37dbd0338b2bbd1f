//go:build linux

package main

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// specialFiles makes a FIFO, a socket, a directory and (as root) a
// character device in dir, by name.
func specialFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{
		"a FIFO (named pipe)": filepath.Join(dir, "fifo.npy"),
		"a socket":            filepath.Join(dir, "sock.npy"),
		"a directory":         filepath.Join(dir, "dir.npy"),
	}
	if err := syscall.Mkfifo(files["a FIFO (named pipe)"], 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", files["a socket"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Mkdir(files["a directory"], 0o755); err != nil {
		t.Fatal(err)
	}
	// A device node of our own (like /dev/null: 1,3), so that a bug here
	// cannot replace a real one.
	dev := filepath.Join(dir, "null.npy")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
		files["a device"] = dev
	} else if !errors.Is(err, fs.ErrPermission) {
		t.Fatal(err)
	}
	return files
}

// Issue 9: outputTarget, the file a write replaces, refuses a FIFO, a
// device, a socket or a directory, naming it and what it is; a symbolic
// link is written through to its target. (stageFile writes FIFOs and
// character devices in place before asking it.)
func TestOutputTarget(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.npy")
	os.WriteFile(real, []byte("x"), 0o644)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	link := func(name, to string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ path, want string }{
		{real, real},
		{filepath.Join(dir, "new.npy"), filepath.Join(dir, "new.npy")},
		{link("abs", real), real},
		{link("rel", "real.npy"), dir + "/real.npy"},
		{link("chain", "rel"), dir + "/real.npy"},
		{link("dangling", "sub/later.npy"), dir + "/sub/later.npy"},
		// Relative to the link's directory, not lexically folded.
		{link("up", "sub/../real.npy"), dir + "/sub/../real.npy"},
	} {
		if got, err := outputTarget(c.path); err != nil || got != c.want {
			t.Errorf("outputTarget(%s) = %q, %v; want %q", c.path, got, err, c.want)
		}
	}

	refused := map[string]string{ // path -> what the error must say
		filepath.Join(dir, "no", "o.npy"): filepath.Join(dir, "no", "o.npy") + ": directory " + filepath.Join(dir, "no") + " does not exist",
		link("loop", "loop"):              "more than 40 symbolic links",
	}
	for kind, p := range specialFiles(t, dir) {
		refused[p] = p + " is " + kind + ", not a regular file; refusing to replace it"
		l := link("to-"+filepath.Base(p), p)
		refused[l] = l + " (a link to " + p + ") is " + kind
	}
	for p, want := range refused {
		if got, err := outputTarget(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("outputTarget(%s) = %q, %v; want an error saying %q", p, got, err, want)
		}
	}
}

// Writing through a link replaces its target atomically, with the target's
// mode, and keeps the link; special files are never touched.
func TestWriteOutputs(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	real := filepath.Join(other, "real.npy")
	os.WriteFile(real, []byte("old"), 0o640)
	link := filepath.Join(dir, "link.npy")
	os.Symlink(real, link)
	dangling := filepath.Join(dir, "dangling.npy")
	os.Symlink(filepath.Join(other, "made.npy"), dangling)
	vals := []float32{1, 2, 3, 4}
	if err := writeNPYFiles([]output{{"O", link, []int{2, 2}, vals}, {"LSE", dangling, []int{4}, vals}}); err != nil {
		t.Fatal(err)
	}
	for l, target := range map[string]string{link: real, dangling: filepath.Join(other, "made.npy")} {
		if st, err := os.Lstat(l); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symbolic link: %v", l, err)
		}
		if a, err := readNPY(target); err != nil || !slices.Equal(a.F32, vals) {
			t.Errorf("%s: %+v, %v", target, a, err)
		}
	}
	if st, _ := os.Stat(real); st.Mode().Perm() != 0o640 {
		t.Errorf("target mode %v, want 0640 kept", st.Mode().Perm())
	}
	for _, d := range []string{dir, other} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.Contains(e.Name(), ".tmp") {
				t.Errorf("temporary file %s left in %s", e.Name(), d)
			}
		}
	}

	for kind, p := range specialFiles(t, dir) {
		before, _ := os.Lstat(p)
		var read <-chan []byte
		if kind == "a FIFO (named pipe)" {
			read = readFIFO(t, p)
		}
		err := writeNPYFiles([]output{{"O", p, []int{1}, vals[:1]}})
		switch kind {
		case "a FIFO (named pipe)", "a device":
			// Streams, written in place (the device is a null device).
			if err != nil {
				t.Errorf("writing %s: %v", p, err)
			}
			if read != nil {
				if b := <-read; len(b) != 128+4 || !strings.HasPrefix(string(b), "\x93NUMPY") {
					t.Errorf("the FIFO carried %d bytes: %q", len(b), b)
				}
			}
		default:
			if err == nil || !strings.Contains(err.Error(), p+" is "+kind) {
				t.Errorf("writing %s: %v, want an error naming it %s", p, err, kind)
			}
		}
		if after, err := os.Lstat(p); err != nil || after.Mode() != before.Mode() {
			t.Errorf("%s was replaced: mode %v, was %v (%v)", p, after.Mode(), before.Mode(), err)
		}
	}
}

// The CLI refuses a special output that is not a stream (a pipe or a
// character device, written in place) before any work, in every command
// that writes files: run, mha, additive (-o, --lse, --weights) and bench
// --plot.
func TestRefuseSpecialOutputs(t *testing.T) {
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	fifo := filepath.Join(dir, "out.png") // a socket, named as the FIFO was
	sock, err := net.Listen("unix", fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	want := fifo + " is a socket, not a regular file; refusing to replace it"
	for _, args := range [][]string{
		{"run", "-q", q, "-k", k, "-v", v, "-o", fifo},
		{"run", "-q", q, "-k", k, "-v", v, "--lse", fifo},
		{"mha", "-x", q, "--params", "p.npz", "--heads", "1", "-o", filepath.Join(dir, "m.npy"), "--weights", fifo},
		{"additive", "-q", q, "-k", k, "-v", v, "--params", "p.npz", "-o", fifo},
		{"bench", "--plot", fifo},
	} {
		_, errOut, code := cli(t, args...)
		if code != exitFail || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, stderr %q; want %d saying %q", args, code, errOut, exitFail, want)
		}
		if st, err := os.Lstat(fifo); err != nil || st.Mode()&fs.ModeSocket == 0 {
			t.Fatalf("%v replaced the socket (%v)", args, err)
		}
	}
	// Two outputs are the same file when one links to the other.
	o := filepath.Join(dir, "o.npy")
	l := filepath.Join(dir, "l.npy")
	os.Symlink("o.npy", l)
	if _, errOut, code := cli(t, "run", "-q", q, "-k", k, "-v", v, "-o", o, "--weights", l); code != exitUsage || !strings.Contains(errOut, "-o and --weights both write "+l) {
		t.Errorf("-o and a link to it: exit %d, stderr %q", code, errOut)
	}
}

// readFIFO opens the FIFO at path for reading, which unblocks its writer,
// and sends what comes through it (nil if it cannot be opened).
func readFIFO(t *testing.T, path string) <-chan []byte {
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- b
	}()
	return got
}

// Outputs are committed all or none. When the third of
// three staged files cannot be renamed into place (its temporary file is
// gone), the first keeps its old contents and the second, new, does not
// appear; nothing else is left beside them. Without hard links the old
// file is renamed aside instead, with the same outcome.
func TestCommitAllOrNone(t *testing.T) {
	for _, links := range []bool{true, false} {
		dir := t.TempDir()
		if !links {
			hardLink = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
			t.Cleanup(func() { hardLink = os.Link })
		}
		a, b, c := filepath.Join(dir, "a.npy"), filepath.Join(dir, "b.npy"), filepath.Join(dir, "c.npy")
		os.WriteFile(a, []byte("old a"), 0o644)
		os.WriteFile(c, []byte("old c"), 0o644)
		stage := func() []*pendingFile {
			var ps []*pendingFile
			for _, path := range []string{a, b, c} {
				p, err := stageFile(path, func(w *bufio.Writer) error {
					_, err := w.WriteString("new " + filepath.Base(path))
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			return ps
		}
		ps := stage()
		os.Remove(ps[2].tmp)
		err := commitAll(ps)
		if err == nil || !strings.Contains(err.Error(), "writing "+c) || !strings.Contains(err.Error(), "put back") {
			t.Errorf("links %v: commitAll with a rename failing: %v; want an error naming %s and saying the others were put back", links, err, c)
		}
		if got, err := os.ReadFile(a); string(got) != "old a" {
			t.Errorf("links %v: %s holds %q (%v) after a failed commit; want its old contents", links, a, got, err)
		}
		if _, err := os.Lstat(b); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("links %v: %s, new, exists after a failed commit (%v)", links, b, err)
		}
		if got, _ := os.ReadFile(c); string(got) != "old c" {
			t.Errorf("links %v: %s holds %q", links, c, got)
		}
		onlyFiles(t, dir, "a.npy", "c.npy")

		if err := commitAll(stage()); err != nil {
			t.Fatalf("links %v: %v", links, err)
		}
		for _, p := range []string{a, b, c} {
			if got, _ := os.ReadFile(p); string(got) != "new "+filepath.Base(p) {
				t.Errorf("links %v: %s holds %q after a commit", links, p, got)
			}
		}
		onlyFiles(t, dir, "a.npy", "b.npy", "c.npy")
	}
}

// onlyFiles fails the test unless dir holds exactly names: no temporary
// file or backup is left.
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %q; want %q", dir, got, names)
	}
}

// blockAfterStaging makes target an existing, non-empty directory once n
// outputs are staged, before any is committed: its rename then fails.
func blockAfterStaging(t *testing.T, n int, target string) {
	staged := 0
	afterStaged = func(string) {
		if staged++; staged != n {
			return
		}
		os.Remove(target)
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Error(err)
		}
		os.WriteFile(filepath.Join(target, "x"), []byte("x"), 0o644)
	}
	t.Cleanup(func() { afterStaged = nil })
}

// Every command with several outputs (run, grad, mha and
// additive through the same code) writes all or none when the rename of
// one fails after the work: an existing output keeps its old contents, a
// new one does not appear, and the command exits 1 naming the file.
func TestCommandOutputsAllOrNone(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	q, k, v := seed000(t, dir)
	x, dy, params := tinyMHA(t, dir)
	dout := save(t, dir, "do.npy", [][]float32{{1, -1}})
	for _, c := range []struct {
		name     string
		args     []string
		old, new []string // outputs, existing and absent, by flag
		blocked  string   // the flag whose target fails
	}{
		{"run, --lse", []string{"run", "-q", q, "-k", k, "-v", v}, []string{"-o"}, []string{"--weights"}, "--lse"},
		{"run, --heatmap", []string{"run", "-q", q, "-k", k, "-v", v}, []string{"--lse"}, []string{"-o"}, "--heatmap"},
		{"grad", []string{"grad", "-q", q, "-k", k, "-v", v, "--dout", dout}, []string{"--dv"}, []string{"--dq"}, "--dk"},
		{"mha --grads", []string{"mha", "-x", x, "--params", params, "--heads", "1", "--dout", dy}, []string{"-o"}, nil, "--grads"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			args := slices.Clone(c.args)
			name := func(flag string) string {
				ext := ".npy"
				switch flag {
				case "--heatmap":
					ext = ".png"
				case "--grads":
					ext = ".npz"
				}
				return filepath.Join(out, strings.TrimLeft(flag, "-")+ext)
			}
			for _, f := range c.old {
				os.WriteFile(name(f), []byte("old"), 0o644)
			}
			for _, f := range slices.Concat(c.old, c.new, []string{c.blocked}) {
				args = append(args, f, name(f))
			}
			blockAfterStaging(t, len(c.old)+len(c.new)+1, name(c.blocked))
			_, errOut, code := cli(t, args...)
			if code != exitFail || !strings.Contains(errOut, name(c.blocked)+" is now a directory") {
				t.Errorf("exit %d, stderr %q; want %d naming %s", code, errOut, exitFail, name(c.blocked))
			}
			for _, f := range c.old {
				if got, err := os.ReadFile(name(f)); string(got) != "old" {
					t.Errorf("%s %s holds %d bytes (%v); want its old contents", f, name(f), len(got), err)
				}
			}
			for _, f := range c.new {
				if _, err := os.Lstat(name(f)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s %s was written (%v)", f, name(f), err)
				}
			}
		})
	}
}

// tinyMHA writes a small mha problem to dir: X (3,2), its output's
// gradient DY and the parameters of one head.
func tinyMHA(t *testing.T, dir string) (x, dy, params string) {
	x = save(t, dir, "x.npy", [][]float32{{0.5, -1}, {1, 0.25}, {-0.5, 2}})
	dy = save(t, dir, "dy.npy", [][]float32{{1, 0}, {-1, 0.5}, {0.25, 1}})
	params = writeNPZ(t, dir, "p.npz", map[string]any{
		"in_proj_weight":  [][]float32{{1, 0}, {0, 1}, {0.5, 0.5}, {-1, 0}, {0, 2}, {1, 1}},
		"out_proj.weight": [][]float32{{1, -1}, {0.5, 1}},
	})
	return x, dy, params
}

// The help of every command with several outputs says what happens to a
// pipe or character device: it is written in place (mha -h and additive
// -h said it was refused), and mha does write a FIFO.
func TestOutputHelp(t *testing.T) {
	for _, cmd := range []string{"run", "grad", "mha", "additive"} {
		help := cliOK(t, cmd, "-h")
		for _, want := range []string{"all or\nnone", "/dev/null, a FIFO)\nis written in place", "old contents\nback"} {
			if !strings.Contains(help, want) {
				t.Errorf("%s -h does not say %q", cmd, want)
			}
		}
		if strings.Contains(help, "FIFO or device refused") {
			t.Errorf("%s -h says a FIFO or device is refused", cmd)
		}
	}
	withDevice(t)
	dir := t.TempDir()
	x, _, params := tinyMHA(t, dir)
	fifo := filepath.Join(dir, "out.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	read := readFIFO(t, fifo)
	cliOK(t, "mha", "-x", x, "--params", params, "--heads", "1", "-o", fifo)
	if b := <-read; !strings.HasPrefix(string(b), "\x93NUMPY") || len(b) != 128+3*2*4 {
		t.Errorf("the FIFO carried %d bytes: %q", len(b), b)
	}
}
