package core

import (
	"strings"
	"testing"
)

// A head width's compile-time bound: the next power of two from 16 up to
// MaxRowWidth, then 512, then MaxHeadWidth (576, MLA's keys).
func TestDMaxOf(t *testing.T) {
	for _, c := range [][2]int{{1, 16}, {16, 16}, {17, 32}, {100, 128}, {256, 256}, {257, 512}, {512, 512}, {513, 576}, {576, 576}} {
		if got := DMaxOf(c[0]); got != c[1] {
			t.Errorf("DMaxOf(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

// A tuning's Wide shape is checked as its tiled shape is, and a clone's
// is its own.
func TestTuningWideShape(t *testing.T) {
	dev := DeviceInfo{Limits: Limits{MaxWorkGroupSize: [3]uint32{1024, 1024, 64}, MaxWorkGroupInvocations: 1024}}
	rows := map[int]int{}
	for _, d := range DMaxBuckets {
		rows[d] = 1
	}
	wide := TiledTuning{Rows: 16, Keys: 8, LanesPerRow: 8, RowsPerLane: 1, DecodeLanesPerRow: 8, SubgroupSize: 8, ComputeUnits: 8}
	tn := Tuning{Path: StorageLoadPath, Wide: &wide,
		Texel:   PathTuning{Rows: rows, WorkGroup: 64, Keys: 1, SplitKeys: 64},
		Storage: PathTuning{Rows: rows, WorkGroup: 64, Keys: 1, SplitKeys: 64}}
	if err := tn.Check(dev); err != nil {
		t.Fatalf("a valid wide shape: %v", err)
	}
	c := tn.Clone()
	c.Wide.LanesPerRow = 3
	if tn.Wide.LanesPerRow != 8 {
		t.Errorf("a clone's Wide changed the original's")
	}
	if err := c.Check(dev); err == nil || !strings.Contains(err.Error(), "wide heads") || !strings.Contains(err.Error(), "3 lanes per row") {
		t.Errorf("Wide with 3 lanes per row: %v; want it refused, naming the field", err)
	}
}
