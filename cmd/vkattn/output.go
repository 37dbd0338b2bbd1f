package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vkattn/vkattn/internal/filekind"
)

// Every file the CLI writes goes through here: outputTarget checks a path
// (early, before any work, and again when writing), stageFile writes it.
// A pipe or a character device (-o /dev/stdout into a pipe, /dev/null) is
// a stream: written in place when the outputs are committed, as a shell's
// > would, with no temporary file.

// streamOutput reports whether path names, through any links, a pipe or a
// character device.
func streamOutput(path string) (fs.FileInfo, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, false
	}
	m := st.Mode()
	return st, m&fs.ModeNamedPipe != 0 || m&fs.ModeCharDevice != 0
}

// stdoutTaken reports whether one of paths is this process's standard
// output (-o /dev/stdout): the command's own text must go elsewhere then.
func stdoutTaken(paths ...string) bool {
	out, err := os.Stdout.Stat()
	if err != nil {
		return false
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && os.SameFile(st, out) {
			return true
		}
	}
	return false
}

// textStreams are where a command's text goes when its outputs are outs:
// stdout, or stderr when an output is standard output. A JSON summary
// cannot move, so asJSON with such an output is a usage error.
func textStreams(cmd string, asJSON bool, stdout, stderr io.Writer, outs []outputFlag) (io.Writer, int) {
	var paths []string
	for _, o := range outs {
		paths = append(paths, o.path)
	}
	if !stdoutTaken(paths...) {
		return stdout, exitOK
	}
	if asJSON {
		return nil, usagef(stderr, cmd, "--json prints to standard output, which an output file also writes; give one of them")
	}
	return stderr, exitOK
}

// outputRule is what the help of every command with several outputs says
// of how they are written.
const outputRule = `Outputs are written to temporary files and renamed into place, all or
none: when one cannot be, those already renamed get their old contents
back and the command exits 1. A symbolic link is written through to its
target. A pipe or character device (-o /dev/stdout, /dev/null, a FIFO)
is written in place, before the files (what it took cannot be taken
back), and the text that would go to stdout goes to stderr then. A
socket, directory or block device is refused before any work.
`

// maxLinkHops bounds a chain of symbolic links, as the kernel's ELOOP does.
const maxLinkHops = 40

// outputTarget is the file writing path replaces: path itself, or what a
// symbolic link at path points to, followed to its end, so that the link
// survives the write. What is there must be a regular file (a FIFO, a
// device, a socket or a directory is refused, never replaced); if nothing
// is there, its directory must exist. Link targets are joined without
// cleaning, so the kernel resolves ".." as it would for the link.
func outputTarget(path string) (string, error) {
	target := path
	for hops := 0; ; hops++ {
		st, err := os.Lstat(target)
		named := path
		if target != path {
			named = fmt.Sprintf("%s (a link to %s)", path, target)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if st, err := os.Stat(path); err == nil {
				// The kernel finds a file where the links, read as names,
				// lead nowhere: a /proc/self/fd link to a socket
				// ("socket:[N]") has no directory to write beside.
				return "", fmt.Errorf("%s is %s, not a regular file; refusing to replace it", named, filekind.Describe(st.Mode()))
			}
			dir := dirOf(target)
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				return "", fmt.Errorf("%s: directory %s does not exist", named, dir)
			}
			return target, nil
		case err != nil:
			return "", err
		case st.Mode().IsRegular():
			return target, nil
		case st.Mode()&fs.ModeSymlink == 0:
			return "", fmt.Errorf("%s is %s, not a regular file; refusing to replace it", named, filekind.Describe(st.Mode()))
		case hops == maxLinkHops:
			return "", fmt.Errorf("%s: more than %d symbolic links", path, maxLinkHops)
		}
		link, err := os.Readlink(target)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = dirOf(target) + string(filepath.Separator) + link
		}
		target = link
	}
}

// dirOf is the directory part of p, uncleaned (filepath.Dir would fold
// "a/link/.." lexically, where the kernel follows the link first). Every
// separator of the OS counts (Windows takes / as well as \), and a
// volume name stays whole ("C:\" is a root, "C:" the drive's current
// directory).
func dirOf(p string) string {
	vol := filepath.VolumeName(p)
	i := len(p) - 1
	for i >= len(vol) && !os.IsPathSeparator(p[i]) {
		i--
	}
	switch {
	case i < len(vol):
		if vol == "" {
			return "."
		}
		return vol
	case i == len(vol):
		return p[:i+1]
	}
	return p[:i]
}

// beside is the path of the file name in target's directory (dirOf).
func beside(target, name string) string {
	d := dirOf(target)
	if os.IsPathSeparator(d[len(d)-1]) || d == filepath.VolumeName(target) {
		return d + name
	}
	return d + string(filepath.Separator) + name
}

// outputFlag is an output file given on the command line; path "" means
// the flag was not given.
type outputFlag struct{ flag, path string }

// checkOutputPaths checks, before any work, that every given output can be
// written (see outputTarget) and that no two write the same file, and
// returns exitOK or the exit status after reporting what is wrong.
func checkOutputPaths(cmd string, stderr io.Writer, outs []outputFlag) int {
	targets := map[string]string{}
	type stream struct {
		flag string
		st   fs.FileInfo
	}
	var streams []stream
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		if st, ok := streamOutput(o.path); ok {
			for _, prev := range streams {
				if os.SameFile(prev.st, st) {
					return usagef(stderr, cmd, "%s and %s both write %s", prev.flag, o.flag, o.path)
				}
			}
			streams = append(streams, stream{o.flag, st})
			continue
		}
		target, err := outputTarget(o.path)
		if err != nil {
			return failf(stderr, cmd, "%s %v", o.flag, err)
		}
		abs, _ := filepath.Abs(target)
		if prev, ok := targets[abs]; ok {
			return usagef(stderr, cmd, "%s and %s both write %s", prev, o.flag, o.path)
		}
		targets[abs] = o.flag
	}
	return exitOK
}

// pendingFile is an output written to a temporary file beside its target;
// commit renames it onto the target, so no reader ever sees half a file.
// A stream output (streamOutput) is written by commit instead.
type pendingFile struct {
	tmp, target string
	stream      func(*bufio.Writer) error
}

// stageFile writes an output for path to a temporary file beside path's
// target (outputTarget), with the mode of the file it will replace. The
// temporary file is registered, so that a signal removes it (signals.go).
func stageFile(path string, write func(*bufio.Writer) error) (*pendingFile, error) {
	if _, ok := streamOutput(path); ok {
		return &pendingFile{target: path, stream: write}, nil
	}
	target, err := outputTarget(path)
	if err != nil {
		return nil, err
	}
	f, err := createTemp(dirOf(target), "."+filepath.Base(target)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	p := &pendingFile{tmp: f.Name(), target: target}
	// CreateTemp makes the file 0600; give the output the mode of the file
	// it replaces, or the usual 0644.
	mode := os.FileMode(0o644)
	if st, err := os.Stat(target); err == nil && st.Mode().IsRegular() {
		mode = st.Mode().Perm()
	}
	err = f.Chmod(mode)
	if err == nil {
		w := bufio.NewWriter(f)
		if err = write(w); err == nil {
			err = w.Flush()
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		removeTemp(p.tmp)
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if afterStaged != nil {
		afterStaged(p.tmp)
	}
	return p, nil
}

// afterStaged, when not nil, is told of every complete temporary file
// before it is renamed: the tests stop a process there to signal it.
var afterStaged func(tmp string)

func (p *pendingFile) commit() error {
	return commitAll([]*pendingFile{p})
}

// writeStream writes a stream output in place. Opening a FIFO waits for
// its reader, as a shell's > does.
func (p *pendingFile) writeStream() error {
	if interrupted() {
		return fmt.Errorf("writing %s: %w", p.target, errInterrupted)
	}
	f, err := os.OpenFile(p.target, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("writing %s: %w", p.target, err)
	}
	w := bufio.NewWriter(f)
	err = p.stream(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", p.target, err)
	}
	return nil
}

func (p *pendingFile) discard() {
	if p.stream == nil {
		removeTemp(p.tmp)
	}
}

// commitAll puts staged outputs in place, all or none. The streams go
// first, since what they took cannot be taken back; a failure there leaves
// every file as it was. The files are then renamed into place while a
// signal waits (holdSignals), and if one cannot be, those renamed before
// it get their old contents back (replaceAll).
func commitAll(ps []*pendingFile) error {
	var files []*pendingFile
	var temps []string
	for _, p := range ps {
		if p.stream == nil {
			files = append(files, p)
			temps = append(temps, p.tmp)
		}
	}
	for _, p := range ps {
		if p.stream == nil {
			continue
		}
		if err := p.writeStream(); err != nil {
			for _, q := range files {
				q.discard()
			}
			return err
		}
	}
	return holdSignals(temps, func() error { return replaceAll(files) })
}

// replaceAll renames each file's temporary file onto its target. Before a
// target is replaced its old file is kept under a backup name (keepOld);
// when a later rename fails, every target replaced so far gets that file
// back, or is removed if it was new, and the error says so. The backups
// are removed once every file is in place.
func replaceAll(files []*pendingFile) error {
	var done []backup
	for i, p := range files {
		b, err := replaceOne(p)
		if err == nil {
			done = append(done, b)
			continue
		}
		for _, q := range files[i+1:] {
			os.Remove(q.tmp)
		}
		restored := true
		for j := len(done) - 1; j >= 0; j-- {
			b := done[j]
			if rerr := b.restore(); rerr != nil {
				restored = false
				if b.old == "" {
					err = fmt.Errorf("%w; and removing the new %s failed: %v", err, b.target, rerr)
				} else {
					err = fmt.Errorf("%w; and putting back %s failed (its old contents are in %s): %v", err, b.target, b.old, rerr)
				}
			}
		}
		if restored && len(done) > 0 {
			err = fmt.Errorf("%w; the outputs already in place were put back as they were", err)
		}
		return err
	}
	for _, b := range done {
		b.drop()
	}
	return nil
}

// replaceOne renames p's temporary file onto its target, keeping the old
// file (keepOld); on failure the target is as it was and the temporary
// file gone.
func replaceOne(p *pendingFile) (backup, error) {
	fail := func(err error) (backup, error) {
		os.Remove(p.tmp)
		return backup{}, err
	}
	// Something not regular may have appeared since stageFile looked.
	if st, err := os.Lstat(p.target); err == nil && !st.Mode().IsRegular() {
		return fail(fmt.Errorf("%s is now %s, not a regular file; refusing to replace it", p.target, filekind.Describe(st.Mode())))
	}
	b, err := keepOld(p.target)
	if err != nil {
		return fail(fmt.Errorf("writing %s: keeping its old contents until every output is written: %w", p.target, err))
	}
	if err := os.Rename(p.tmp, p.target); err != nil {
		if b.moved {
			b.restore()
		} else {
			b.drop()
		}
		return fail(fmt.Errorf("writing %s: %w", p.target, err))
	}
	return b, nil
}

// backup is what replaceOne did to a target: old names the file that was
// there (empty if none), as a second hard link, or renamed aside (moved)
// where the file system has no hard links.
type backup struct {
	target, old string
	moved       bool
}

// keepOld keeps target's current file, if any, under a backup name beside
// it. A hard link leaves the target in place until it is replaced, so a
// reader never finds it missing.
func keepOld(target string) (backup, error) {
	b := backup{target: target}
	if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
		return b, nil
	} else if err != nil {
		return b, err
	}
	prefix := beside(target, "."+filepath.Base(target)+".old")
	for range 100 {
		name := prefix + strconv.FormatUint(rand.Uint64(), 36)
		err := hardLink(target, name)
		if err == nil {
			b.old = name
			return b, nil
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		// No hard link here: rename the file aside, onto a name made ours.
		f, cerr := os.CreateTemp(dirOf(target), "."+filepath.Base(target)+".old*")
		if cerr != nil {
			return b, err
		}
		f.Close()
		if err := os.Rename(target, f.Name()); err != nil {
			os.Remove(f.Name())
			return b, err
		}
		b.old, b.moved = f.Name(), true
		return b, nil
	}
	return b, fmt.Errorf("no free name for a backup beside %s", target)
}

// hardLink is os.Link; the tests make it fail as on a file system
// without hard links.
var hardLink = os.Link

// restore puts the old file back on the target, or removes the target if
// there was none.
func (b backup) restore() error {
	if b.old == "" {
		return os.Remove(b.target)
	}
	return os.Rename(b.old, b.target)
}

// drop removes the backup once it is no longer needed.
func (b backup) drop() {
	if b.old != "" {
		os.Remove(b.old)
	}
}

// writeFileAtomic writes one output through stageFile and commits it.
func writeFileAtomic(path string, write func(*bufio.Writer) error) error {
	p, err := stageFile(path, write)
	if err != nil {
		return err
	}
	return p.commit()
}
