//go:build !linux

package resident

import (
	"errors"
	"runtime"
)

// Bytes is measured on Linux only; elsewhere it fails, so that the leak
// and soak tests that need it fail there rather than the test binary not
// building (the Windows build of the suite runs other tests).
func Bytes() (int64, error) {
	return 0, errors.New("resident: the resident set size is measured on Linux only, not " + runtime.GOOS)
}
