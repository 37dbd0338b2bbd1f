package vkattn_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/pipelines"
)

// Every test in this package shares two devices opened with the validation
// layer on: the default plan, and the same device forced onto the storage
// load path so both kernel paths are proven on whatever device CI has.
var (
	dev        *vkattn.Device
	storageDev *vkattn.Device
)

// The sweeps run their cases as parallel subtests on pools of such
// devices: lavapipe compiles a kernel variant at its first dispatch, on the
// queue thread of the device, so devices in parallel compile variants in
// parallel (and Mesa's shader cache serves the others what one compiled).
// That is most of a cold run's time.
var defaultPool, storagePool chan *vkattn.Device

// poolSize is how many devices of each kind the sweeps share.
func poolSize() int { return max(2, min(runtime.NumCPU(), 4)) }

// kernelOf names the kernel a plan compiles: what lavapipe compiles once
// per variant and specialization (a plan without its problem's extents).
func kernelOf(p pipelines.AttentionPlan) pipelines.AttentionPlan {
	return pipelines.AttentionPlan{Variant: p.Variant, DMax: p.DMax, Rows: p.Rows, KeyTile: p.KeyTile,
		WorkGroup: p.WorkGroup, Masked: p.Masked, SharedLoads: p.SharedLoads, Splits: min(p.Splits, 1)}
}

// inCompileOrder runs case i of a sweep (run is a subtest body that calls
// onPool) in two rounds: first one case of each kernel, in parallel, so
// that the devices compile different kernels at once; then the rest, which
// find theirs compiled. kernels[i] is the kernel case i compiles.
func inCompileOrder[K comparable](t *testing.T, kernels []K, name func(i int) string, run func(t *testing.T, i int)) {
	t.Helper()
	var first, rest []int
	seen := map[K]bool{}
	for i, k := range kernels {
		if seen[k] {
			rest = append(rest, i)
		} else {
			seen[k] = true
			first = append(first, i)
		}
	}
	for _, round := range []struct {
		name  string
		cases []int
	}{{"compiling", first}, {"compiled", rest}} {
		t.Run(round.name, func(t *testing.T) {
			for _, i := range round.cases {
				t.Run(name(i), func(t *testing.T) { run(t, i) })
			}
		})
	}
}

// onPool runs f as a parallel subtest on a free device of the pool like d
// (the default or the storage path).
func onPool(t *testing.T, d *vkattn.Device, f func(d *vkattn.Device)) {
	t.Helper()
	t.Parallel()
	pool := defaultPool
	if d == storageDev {
		pool = storagePool
	}
	x := <-pool
	defer func() { pool <- x }()
	f(x)
}

func TestMain(m *testing.M) {
	var err error
	if dev, err = vkattn.Open(vkattn.Config{Validation: true}); err != nil {
		fmt.Fprintln(os.Stderr, "open device:", err)
		os.Exit(2)
	}
	if storageDev, err = vkattn.Open(vkattn.Config{Validation: true, LoadPath: vkattn.StorageLoadPath}); err != nil {
		fmt.Fprintln(os.Stderr, "open device:", err)
		os.Exit(2)
	}
	defaultPool, storagePool = make(chan *vkattn.Device, poolSize()), make(chan *vkattn.Device, poolSize())
	opened := []*vkattn.Device{dev, storageDev}
	defaultPool <- dev
	storagePool <- storageDev
	for i := 1; i < poolSize() && os.Getenv("VKATTN_SUBPROCESS") == ""; i++ {
		for _, c := range []struct {
			pool chan *vkattn.Device
			path vkattn.LoadPath
		}{{defaultPool, vkattn.AutoLoadPath}, {storagePool, vkattn.StorageLoadPath}} {
			d, err := vkattn.Open(vkattn.Config{Validation: true, LoadPath: c.path})
			if err != nil {
				fmt.Fprintln(os.Stderr, "open device:", err)
				os.Exit(2)
			}
			opened = append(opened, d)
			c.pool <- d
		}
	}
	code := m.Run()
	for _, d := range opened {
		if err := d.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close device:", err)
			code = 1
		}
	}
	// The suite fails on any validation message and on any leaked object.
	if msgs := vkattn.ValidationMessages(); len(msgs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d Vulkan validation message(s):\n", len(msgs))
		for _, m := range msgs {
			fmt.Fprintln(os.Stderr, " ", m)
		}
		code = 1
	}
	if n := vkattn.LiveObjects(); n != 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d Vulkan objects alive after Close\n", n)
		code = 1
	}
	os.Exit(code)
}
