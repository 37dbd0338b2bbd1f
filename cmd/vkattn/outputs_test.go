//go:build linux

package main

import (
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
