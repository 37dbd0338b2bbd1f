package vk

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vkattn/vkattn/shaders"
)

// openTestDevice opens the default device with the validation layer on;
// before is LiveObjects() from just before, for closeTestDevice. The
// caller closes both (the tests check that closing frees everything).
func openTestDevice(t *testing.T) (inst *Instance, dev *Device, before int64) {
	t.Helper()
	before = LiveObjects()
	inst, dev, err := OpenDefault(InstanceConfig{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	return inst, dev, before
}

// openSelftest is openTestDevice with the selftest kernel built on dev.
func openSelftest(t *testing.T) (inst *Instance, dev *Device, k *Kernel, before int64) {
	t.Helper()
	inst, dev, before = openTestDevice(t)
	return inst, dev, selftestKernel(t, dev), before
}

// selftestKernel builds shaders/selftest.comp (out = in*factor + 7).
func selftestKernel(t *testing.T, dev *Device) *Kernel {
	t.Helper()
	code, err := shaders.SPIRV("selftest")
	if err != nil {
		t.Fatal(err)
	}
	k, err := dev.NewKernel(KernelSpec{
		Name: "selftest", SPIRV: code, Bindings: []BindingType{StorageBuffer, StorageBuffer},
		Spec: []SpecConstant{{ID: 0, Value: 7}}, PushSize: 8,
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// selftestBuffers makes in and out buffers of n float32s and binds them
// to the selftest kernel k.
func selftestBuffers(t *testing.T, dev *Device, k *Kernel, n int) (in, out *Buffer, set *DescriptorSet) {
	t.Helper()
	in, err := dev.NewBuffer(4 * uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	if out, err = dev.NewBuffer(4 * uint64(n)); err != nil {
		t.Fatal(err)
	}
	if set, err = k.Bind([]Arg{{Buffer: in}, {Buffer: out}}); err != nil {
		t.Fatal(err)
	}
	return in, out, set
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

// submitAndWait runs recorded commands once and waits for them.
func submitAndWait(t *testing.T, cmds *Commands) {
	t.Helper()
	if err := cmds.Submit(); err != nil {
		t.Fatal(err)
	}
	if err := cmds.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// readFloats reads n float32 values from the start of b.
func readFloats(t *testing.T, b *Buffer, n int) []float32 {
	t.Helper()
	got := make([]float32, n)
	if err := b.ReadFloat32(0, got); err != nil {
		t.Fatal(err)
	}
	return got
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

// closeTestDevice closes dev and inst and checks that nothing is left
// alive and the validation layer said nothing.
func closeTestDevice(t *testing.T, inst *Instance, dev *Device, before int64) {
	t.Helper()
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	inst.Close()
	if n := LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after Close, want %d", n, before)
	}
	if msgs := ValidationMessages(); len(msgs) > 0 {
		t.Errorf("validation messages:\n%v", msgs)
	}
}

// TestBufferRoundTripAndClose checks the owner tree: a device with buffers
// in it closes them all, the live-object count returns to where it started,
// and the validation layer reports nothing.
func TestBufferRoundTripAndClose(t *testing.T) {
	inst, dev, before := openTestDevice(t)
	buf, err := dev.NewBuffer(40)
	if err != nil {
		t.Fatal(err)
	}
	in := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if err := buf.WriteFloat32(0, in); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 4)
	if err := buf.ReadFloat32(3, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		if v != in[3+i] {
			t.Fatalf("read back %v, want %v", out, in[3:7])
		}
	}
	if err := buf.Read(40, make([]byte, 16)); err == nil {
		t.Errorf("read past the end of a 48-byte buffer succeeded")
	}
	if st := dev.AllocStats(); st.Live != 48 || st.Count != 1 {
		t.Errorf("alloc stats %+v, want 48 live bytes in 1 buffer", st)
	}
	// A second buffer left open is freed by the device's Close.
	if _, err := dev.NewBuffer(100); err != nil {
		t.Fatal(err)
	}
	c, err := dev.NewCommands(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Begin(); err != nil {
		t.Fatal(err)
	}
	c.Timestamp(0)
	c.Barrier()
	c.Timestamp(1)
	if err := c.End(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // replay the same recording
		if err := c.Submit(); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := c.Elapsed(0, 1); err != nil || (dev.Info.TimestampsOK && !ok) {
		t.Errorf("Elapsed: ok=%v err=%v", ok, err)
	}
	c.Close()
	buf.Close()
	closeTestDevice(t, inst, dev, before)
}

// TestKernelPushAndSpecConstants runs shaders/selftest.comp, which computes
// out[i] = in[i]*factor + SPEC_ADD for i < count: the factor and count come
// in as push constants, SPEC_ADD as a specialization constant. The recorded
// commands are replayed with new input to show record-once, submit-many.
func TestKernelPushAndSpecConstants(t *testing.T) {
	inst, dev, k, before := openSelftest(t)
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
		submitAndWait(t, cmds)
		got := readFloats(t, out, n)
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

func TestFindDevice(t *testing.T) {
	inst, err := NewInstance(InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	devs := inst.Devices()
	if len(devs) == 0 {
		t.Fatal("no devices")
	}
	if i, err := inst.FindDevice("0"); err != nil || i != 0 {
		t.Errorf("FindDevice(0) = %d, %v", i, err)
	}
	if _, err := inst.FindDevice("99"); err == nil {
		t.Errorf("FindDevice(99) succeeded with %d devices", len(devs))
	}
	if _, err := inst.FindDevice("no such device name"); err == nil {
		t.Errorf("FindDevice of an unknown name succeeded")
	}
	if i, err := inst.FindDevice(devs[0].Name[:3]); err != nil && i != 0 {
		t.Errorf("FindDevice by name prefix: %v", err)
	}
}

// A temporary file a process killed while saving the pipeline cache left
// behind is removed by the next device that opens the cache; one of a
// save in progress (recent) is left alone.
func TestStalePipelineCacheTempsRemoved(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	t.Setenv("HOME", dir)
	inst, d, before := openTestDevice(t)
	stale, fresh := d.cachePath+".123.tmp", d.cachePath+".456.tmp"
	if err := os.MkdirAll(filepath.Dir(d.cachePath), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{stale, fresh} {
		if err := os.WriteFile(f, []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	closeTestDevice(t, inst, d, before)
	inst, d, before = openTestDevice(t)
	defer closeTestDevice(t, inst, d, before)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a stale temporary cache file survived the next Open: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a recent temporary cache file (a save in progress) was removed: %v", err)
	}
}
