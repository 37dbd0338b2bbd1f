package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vkattn/vkattn/internal/filekind"
)

// Every file the CLI writes goes through here: outputTarget checks a path
// (early, before any work, and again when writing), stageFile writes it.

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
// "a/link/.." lexically, where the kernel follows the link first).
func dirOf(p string) string {
	i := strings.LastIndexByte(p, filepath.Separator)
	switch {
	case i < 0:
		return "."
	case i == 0:
		return string(filepath.Separator)
	}
	return p[:i]
}

// outputFlag is an output file given on the command line; path "" means
// the flag was not given.
type outputFlag struct{ flag, path string }

// checkOutputPaths checks, before any work, that every given output can be
// written (see outputTarget) and that no two write the same file, and
// returns exitOK or the exit status after reporting what is wrong.
func checkOutputPaths(cmd string, stderr io.Writer, outs []outputFlag) int {
	targets := map[string]string{}
	for _, o := range outs {
		if o.path == "" {
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
type pendingFile struct {
	tmp, target string
}

// stageFile writes an output for path to a temporary file beside path's
// target (outputTarget), with the mode of the file it will replace.
func stageFile(path string, write func(*bufio.Writer) error) (*pendingFile, error) {
	target, err := outputTarget(path)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dirOf(target), "."+filepath.Base(target)+".tmp*")
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
		os.Remove(p.tmp)
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return p, nil
}

func (p *pendingFile) commit() error {
	// Something not regular may have appeared since stageFile looked.
	if st, err := os.Lstat(p.target); err == nil && !st.Mode().IsRegular() {
		os.Remove(p.tmp)
		return fmt.Errorf("%s is now %s, not a regular file; refusing to replace it", p.target, filekind.Describe(st.Mode()))
	}
	if err := os.Rename(p.tmp, p.target); err != nil {
		os.Remove(p.tmp)
		return err
	}
	return nil
}

func (p *pendingFile) discard() { os.Remove(p.tmp) }

// writeFileAtomic writes one output through stageFile and commits it.
func writeFileAtomic(path string, write func(*bufio.Writer) error) error {
	p, err := stageFile(path, write)
	if err != nil {
		return err
	}
	return p.commit()
}
