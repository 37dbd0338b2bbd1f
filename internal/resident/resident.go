//go:build linux

// Package resident measures the process's resident memory, for the leak
// and soak tests: what still grows after Go has returned its free memory to
// the OS is C memory (the driver's, vulkan-go's copies).
package resident

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Bytes is the resident set size after a collection that returns freed Go
// memory to the OS. It reads /proc/self/statm (Linux only: the build tag).
func Bytes() (int64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return 0, fmt.Errorf("resident: /proc/self/statm holds %q", b)
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resident: /proc/self/statm: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}
