package main

import (
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
)

// `vkattn devices` says which subgroup widths kernels are planned for: a
// size in the device's range for the tiled and matrix kernels where it has
// size control with full subgroups, shared K/V loads only at a single
// width.
func TestDevicesSayPlannedWidths(t *testing.T) {
	dev := func(control bool, sg, lo, hi uint32) vkattn.DeviceInfo {
		return vkattn.DeviceInfo{SubgroupSizeControl: control, FullSubgroups: control,
			Limits: core.Limits{SubgroupSize: sg, MinSubgroupSize: lo, MaxSubgroupSize: hi, SubgroupShuffle: true}}
	}
	for _, c := range []struct {
		name string
		dev  vkattn.DeviceInfo
		want []string
	}{
		{"lavapipe", dev(true, 8, 8, 8), []string{"one size in 8..8", "shared K/V loads at 8"}},
		{"Intel", dev(true, 32, 8, 32), []string{"one size in 8..32", "without shared K/V loads"}},
		{"MoltenVK", dev(false, 32, 4, 32), []string{"no tiled or matrix kernels", "without shared K/V loads"}},
	} {
		got := plannedWidths(c.dev)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q, want %q in it", c.name, got, w)
			}
		}
	}
	var b strings.Builder
	printDevice(&b, dev(true, 8, 8, 8), true)
	if !strings.Contains(b.String(), "kernels' subgroup widths") {
		t.Errorf("devices does not list the planned widths:\n%s", b.String())
	}
}
