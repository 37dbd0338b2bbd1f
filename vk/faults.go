package vk

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	vulkan "github.com/vulkan-go/vulkan"
)

// Fault makes Vulkan calls fail as a driver can, for tests of what vkattn
// does after a failure (SetFault): the Nth call, counted from SetFault,
// whose name starts with Call ("" for any), or every such call when Nth is
// 0, returns Result instead of being made, so nothing it would have
// created exists.
type Fault struct {
	Call   string
	Nth    int
	Result vulkan.Result
}

// faults is the fault in force and the matching calls seen since it was
// set. A fault of Nth -1 fails nothing and lists the site of each call
// (FaultSites): the calls a piece of work makes.
var faults struct {
	mu    sync.Mutex
	fault *Fault
	seen  int
	sites []string
}

// SetFault puts f in force (nil: none) and restarts the count of matching
// calls. It returns that count for the fault it replaces.
func SetFault(f *Fault) int {
	faults.mu.Lock()
	defer faults.mu.Unlock()
	seen := faults.seen
	faults.fault, faults.seen = f, 0
	if f != nil && f.Nth < 0 {
		faults.sites = nil
	}
	return seen
}

// FaultSites lists, call by call, where the calls counted by the last
// fault of Nth -1 were made: the call's name and the file and line that
// made it, so a sweep can fail each site once rather than each call.
func FaultSites() []string {
	faults.mu.Lock()
	defer faults.mu.Unlock()
	return slices.Clone(faults.sites)
}

// site is the file and line outside this file that made the call.
func site() string {
	for skip := 2; ; skip++ {
		_, file, line, ok := runtime.Caller(skip)
		if !ok {
			return "?"
		}
		if !strings.HasSuffix(file, "/faults.go") {
			return fmt.Sprintf("%s:%d", filepath.Base(file), line)
		}
	}
}

// made runs fn, the Vulkan call named name, unless the fault in force
// takes its place.
func made(name string, fn func() vulkan.Result) vulkan.Result {
	faults.mu.Lock()
	f := faults.fault
	injected := false
	if f != nil && strings.HasPrefix(name, f.Call) {
		faults.seen++
		injected = f.Nth == 0 || faults.seen == f.Nth
		if f.Nth < 0 {
			faults.sites = append(faults.sites, name+" at "+site())
		}
	}
	faults.mu.Unlock()
	if injected {
		return f.Result
	}
	return fn()
}

// call makes the Vulkan call fn named name (unless a fault takes its
// place) and returns its result as check does.
func call(name string, fn func() vulkan.Result) error { return check(name, made(name, fn)) }

// ErrDeviceLost is wrapped by every use of a device after one of its
// Vulkan calls returned VK_ERROR_DEVICE_LOST: the device's work is gone
// and nothing more runs on it (Close still frees what it can).
var ErrDeviceLost = errors.New("vk: device lost")

// call is the package's call of a Vulkan call on d: a lost device is
// noted, so that every later use of d fails fast (enter).
func (d *Device) call(name string, fn func() vulkan.Result) error {
	err := call(name, fn)
	d.noteLost(err)
	return err
}

// noteLost marks d lost when err is VK_ERROR_DEVICE_LOST.
func (d *Device) noteLost(err error) {
	var e *Error
	if errors.As(err, &e) && vulkan.Result(e.Result) == vulkan.ErrorDeviceLost {
		d.lost.Store(true)
	}
}
