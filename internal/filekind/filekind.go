// Package filekind names the kind of a file for error messages.
package filekind

import "io/fs"

// Describe says what kind of file m is, with an article: "a regular file",
// "a directory", "a FIFO (named pipe)", "a device", "a socket", "a
// symbolic link" or "not a regular file".
func Describe(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
