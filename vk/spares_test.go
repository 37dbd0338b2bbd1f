package vk

import (
	"testing"
)

// Objects that are made and freed over and over (a one-shot call's
// buffers, descriptor sets and command buffers) come back from the
// spares: after the first round no memory is allocated and no pool or
// command buffer is created, every round computes what it should on
// whatever the spare held before, LiveObjects is back where it was after
// each round, and the device's Close frees the spares.
func TestSparesServeRepeatedCalls(t *testing.T) {
	inst, d, k, before := openSelftest(t)
	defer closeTestDevice(t, inst, d, before)
	const n = 64
	round := func(i int) {
		in, out, set := selftestBuffers(t, d, k, n)
		defer in.Close()
		defer out.Close()
		defer set.Close()
		x := make([]float32, n)
		for j := range x {
			x[j] = float32(i*n + j)
		}
		if err := in.WriteFloat32(0, x); err != nil {
			t.Fatal(err)
		}
		cmds := recordSelftest(t, d, k, set, selftestPush(2, n), 1)
		defer cmds.Close()
		submitAndWait(t, cmds)
		got := readFloats(t, out, n)
		for j, v := range got {
			if want := 2*x[j] + 7; v != want {
				t.Fatalf("round %d: out[%d] = %v, want %v", i, j, v, want)
			}
		}
	}
	round(0)
	objects, first := LiveObjects(), d.AllocStats()
	for i := 1; i <= 5; i++ {
		round(i)
		if n := LiveObjects(); n != objects {
			t.Errorf("round %d: %d objects alive after it, %d after the first", i, n, objects)
		}
	}
	after := d.AllocStats()
	if after.Count != first.Count || after.Pools != first.Pools || after.Commands != first.Commands {
		t.Errorf("rounds after the first allocated %d buffers, %d descriptor pools, %d command buffers; want none",
			after.Count-first.Count, after.Pools-first.Pools, after.Commands-first.Commands)
	}
	if got := after.Submits - first.Submits; got != 5 {
		t.Errorf("5 rounds counted %d submissions", got)
	}
	if got := after.Waits - first.Waits; got != 5 {
		t.Errorf("5 rounds counted %d host waits", got)
	}
	if after.Live != first.Live {
		t.Errorf("%d bytes live after the rounds, %d after the first", after.Live, first.Live)
	}
}
