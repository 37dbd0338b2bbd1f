//go:build linux

package vk

import (
	"testing"

	"github.com/vkattn/vkattn/internal/resident"
)

// residentBytes is the process's resident memory (see package resident).
func residentBytes(t *testing.T) int64 {
	t.Helper()
	n, err := resident.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPerCallObjectsDoNotLeak creates and frees what every unprepared call
// creates (a command buffer with fence and timestamp queries, recording,
// a buffer) many times. vulkan-go keeps a C copy of each struct passed by
// pointer until Free is called on it; before those were freed this grew by
// ~300 bytes an iteration (~9 MB here), now it stays flat.
func TestPerCallObjectsDoNotLeak(t *testing.T) {
	inst, dev, _ := openTestDevice(t)
	defer inst.Close()
	defer dev.Close()
	round := func(n int) {
		for i := 0; i < n; i++ {
			c, err := dev.NewCommands(2)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Begin(); err != nil {
				t.Fatal(err)
			}
			if err := c.End(); err != nil {
				t.Fatal(err)
			}
			c.Close()
			b, err := dev.NewBuffer(256)
			if err != nil {
				t.Fatal(err)
			}
			b.Close()
		}
	}
	round(5000) // warm-up: the driver's and allocator's own pools settle
	before := residentBytes(t)
	const n = 30000
	round(n)
	grew := residentBytes(t) - before
	t.Logf("resident memory grew %d bytes over %d iterations", grew, n)
	if grew > 3<<20 {
		t.Errorf("resident memory grew %d bytes over %d iterations (%d per iteration): C memory leaks", grew, n, grew/n)
	}
}
