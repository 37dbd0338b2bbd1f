// Package devtest is what the device tests of packages vkattn, kv and nn
// share: Main, their TestMain, which opens the shared devices (Dev,
// StorageDev, NVIDIADev, ...) with the Vulkan validation layer on and
// fails on any validation message and on objects left alive; problems
// run on a device and checked against the float64 reference; the MHA
// cases; refusals. Only tests import it.
package devtest

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

// Every test of the packages that run Main shares devices opened with the
// validation layer on: the default plan, the same device forced onto the storage
// load path so both kernel paths are proven on whatever device CI has,
// and the device planned as NVIDIA's and AMD's drivers would be (the
// tiled GPU kernels, with their vendors' tile shapes).
var (
	Dev        *vkattn.Device
	StorageDev *vkattn.Device
	NVIDIADev  *vkattn.Device
	AMDDev     *vkattn.Device
	IntelDev   *vkattn.Device
	// rowDev and rowStorageDev plan as lavapipe's quirk table says (the
	// row kernels, texel and storage load paths) whatever the device and
	// VKATTN_PLAN_AS: dev and storageDev where they plan so themselves.
	RowDev, RowStorageDev *vkattn.Device
)

// GPUPlanDevs are the devices planned as GPU vendors.
func GPUPlanDevs() []*vkattn.Device { return []*vkattn.Device{NVIDIADev, AMDDev} }

// The sweeps run their cases as parallel subtests on pools of such
// devices: lavapipe compiles a kernel variant at its first dispatch, on the
// queue thread of the device, so devices in parallel compile variants in
// parallel (and Mesa's shader cache serves the others what one compiled).
// That is most of a cold run's time.
var pools = map[*vkattn.Device]chan *vkattn.Device{}

// poolSize is how many devices of each kind the sweeps share.
func poolSize() int { return max(2, min(runtime.NumCPU(), 4)) }

// KernelOf names the kernel a plan compiles: what lavapipe compiles once
// per variant and specialization (a plan without its problem's extents).
func KernelOf(k vkattn.KernelPlan) pipelines.AttentionPlan {
	return pipelines.AttentionPlan{Variant: VariantOf(k), KernelLayout: core.KernelLayout{DMax: k.DMax, Rows: k.Rows, KeyTile: k.KeyTile,
		WorkGroup: k.WorkGroup, Masked: k.Masked, SharedLoads: k.SharedLoads, Splits: min(k.Splits, 1)}}
}

// VariantOf is the kernel variant a plan names (the zero Variant for a
// name no variant has).
func VariantOf(k vkattn.KernelPlan) pipelines.Variant {
	v, _ := pipelines.VariantNamed(k.Variant)
	return v
}

// InCompileOrder runs case i of a sweep (run is a subtest body that calls
// onPool) in two rounds: first one case of each kernel, in parallel, so
// that the devices compile different kernels at once; then the rest, which
// find theirs compiled. kernels[i] is the kernel case i compiles.
func InCompileOrder[K comparable](t *testing.T, kernels []K, name func(i int) string, run func(t *testing.T, i int)) {
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

// OnPool runs f as a parallel subtest on a free device of the pool like d
// (one of the shared devices above).
func OnPool(t *testing.T, d *vkattn.Device, f func(d *vkattn.Device)) {
	t.Helper()
	t.Parallel()
	pool := pools[d]
	x := <-pool
	defer func() { pool <- x }()
	f(x)
}

// validate turns the Vulkan validation layer on for the suite's devices;
// VKATTN_TEST_VALIDATION=0 leaves it off where it cannot load (under
// Wine, whose Vulkan passes no layers through: tools/wine.sh).
var validate = os.Getenv("VKATTN_TEST_VALIDATION") != "0"

// Main is the TestMain of the packages whose tests run on the devices
// above: it opens them, runs the tests and exits with their status, which
// fails on any Vulkan validation message and on any object left alive
// after the devices are closed.
func Main(m *testing.M) {
	configs := []struct {
		shared *(*vkattn.Device)
		cfg    vkattn.Config
	}{
		{&Dev, vkattn.Config{Validation: validate}},
		{&StorageDev, vkattn.Config{Validation: validate, LoadPath: vkattn.StorageLoadPath}},
		{&NVIDIADev, vkattn.Config{Validation: validate, PlanAs: "nvidia"}},
		{&AMDDev, vkattn.Config{Validation: validate, PlanAs: "amd"}},
		{&IntelDev, vkattn.Config{Validation: validate, PlanAs: "intel"}},
	}
	var opened []*vkattn.Device
	open := func(cfg vkattn.Config) *vkattn.Device {
		d, err := vkattn.Open(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "open device:", err)
			os.Exit(2)
		}
		opened = append(opened, d)
		return d
	}
	for _, c := range configs {
		*c.shared = open(c.cfg)
		pool := make(chan *vkattn.Device, poolSize())
		pool <- *c.shared
		for i := 1; i < poolSize() && os.Getenv("VKATTN_SUBPROCESS") == ""; i++ {
			pool <- open(c.cfg)
		}
		pools[*c.shared] = pool
	}
	RowDev, RowStorageDev = Dev, StorageDev
	if Dev.PlannedAs() != "" || Dev.Info().DriverID != core.DriverIDLavapipe {
		RowDev = open(vkattn.Config{Validation: validate, PlanAs: "lavapipe"})
		RowStorageDev = open(vkattn.Config{Validation: validate, PlanAs: "lavapipe", LoadPath: vkattn.StorageLoadPath})
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

// EveryPlan are the shared devices by plan, for tests that prove a
// property of every kernel family: the row kernels on both load paths and
// the tiled GPU kernels as two vendors plan them.
func EveryPlan() map[string]*vkattn.Device {
	return map[string]*vkattn.Device{"auto": Dev, "storage": StorageDev, "nvidia": NVIDIADev, "amd": AMDDev}
}

// InParallel runs f for each plan as parallel subtests named by plan. The
// plans are devices of their own, and lavapipe compiles a device's kernels
// on that device's queue thread, so the plans' kernels compile at once.
func InParallel(t *testing.T, plans []string, f func(t *testing.T, plan string)) {
	t.Helper()
	for _, plan := range plans {
		t.Run(plan, func(t *testing.T) {
			t.Parallel()
			f(t, plan)
		})
	}
}

// EveryPlanName are everyPlan's names, in a fixed order.
var EveryPlanName = []string{"auto", "storage", "nvidia", "amd"}

// OwnAndNVIDIA name the two plans most device tests run on: the device's
// own (lavapipe's: row kernels, host-visible memory) and NVIDIA's (tiled
// kernels, discrete memory with staged transfers).
var OwnAndNVIDIA = []string{"auto", "nvidia"}
