package vk

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
)

// TestKernelPushAndSpecConstants runs shaders/selftest.comp, which computes
// out[i] = in[i]*factor + SPEC_ADD for i < count: the factor and count come
// in as push constants, SPEC_ADD as a specialization constant. The recorded
// commands are replayed with new input to show record-once, submit-many.
func TestKernelPushAndSpecConstants(t *testing.T) {
	before := LiveObjects()
	inst, dev := openTestDevice(t)
	k := selftestKernel(t, dev)
	const n = 100
	in, out, set := selftestBuffers(t, dev, k, n)
	push := selftestPush(2.5, 90) // the last 10 outputs stay untouched
	cmds := recordSelftest(t, dev, k, set, push, 2)
	if err := cmds.Push(k, push[:4]); err == nil {
		t.Errorf("Push with 4 of 8 bytes succeeded")
	}
	for round := 0; round < 2; round++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i + 100*round)
		}
		if err := in.WriteFloat32(0, x); err != nil {
			t.Fatal(err)
		}
		if err := out.WriteFloat32(0, make([]float32, n)); err != nil {
			t.Fatal(err)
		}
		if err := cmds.Submit(); err != nil {
			t.Fatal(err)
		}
		if err := cmds.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		if err := out.ReadFloat32(0, got); err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			want := float32(0)
			if i < 90 {
				want = x[i]*2.5 + 7
			}
			if g != want {
				t.Fatalf("round %d: out[%d] = %v, want %v", round, i, g, want)
			}
		}
	}
	cmds.Close()
	closeTestDevice(t, inst, dev, before) // also frees the kernel, its set and both buffers
}

// selftestPush is the push constants of shaders/selftest.comp.
func selftestPush(factor float32, count uint32) []byte {
	push := make([]byte, 8)
	binary.LittleEndian.PutUint32(push, math.Float32bits(factor))
	binary.LittleEndian.PutUint32(push[4:], count)
	return push
}

// recordSelftest records push constants, one dispatch of groups workgroups
// of the selftest kernel, and a barrier.
func recordSelftest(t *testing.T, dev *Device, k *Kernel, set *DescriptorSet, push []byte, groups uint32) *Commands {
	t.Helper()
	cmds, err := selftestCommands(dev, k, set, push, groups)
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

// selftestCommands is recordSelftest returning its error, for goroutines
// other than the test's.
func selftestCommands(dev *Device, k *Kernel, set *DescriptorSet, push []byte, groups uint32) (*Commands, error) {
	cmds, err := dev.NewCommands(0)
	if err != nil {
		return nil, err
	}
	err = cmds.Begin()
	if err == nil {
		err = cmds.Push(k, push)
	}
	if err == nil {
		err = cmds.Dispatch(k, set, [3]uint32{groups, 1, 1})
	}
	if err == nil {
		cmds.Barrier()
		err = cmds.End()
	}
	if err != nil {
		cmds.Close()
		return nil, err
	}
	return cmds, nil
}
