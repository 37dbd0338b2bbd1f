package vk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/internal/parallel"
)

// TestBufferClosedWhileInFlight: a buffer closed while submitted work uses
// it is freed only once that work is seen to finish; the commands then
// refuse to run again, and everything is gone after the device's Close.
func TestBufferClosedWhileInFlight(t *testing.T) {
	inst, dev, k, before := openSelftest(t)
	const n = 1 << 16
	in, _, set := selftestBuffers(t, dev, k, n)
	cmds := recordSelftest(t, dev, k, set, selftestPush(2, n), n/64)
	if err := cmds.Submit(); err != nil {
		t.Fatal(err)
	}
	live := dev.AllocStats().Live
	in.Close() // while (or just after) the dispatch reads it
	if err := in.Write(0, make([]byte, 4)); !errors.Is(err, ErrClosed) {
		t.Errorf("Write to a closed buffer: %v, want ErrClosed", err)
	}
	if err := cmds.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := dev.AllocStats().Live; got != live-4*n {
		t.Errorf("%d live bytes after the work finished, want %d (the closed buffer freed)", got, live-4*n)
	}
	if err := cmds.Submit(); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit of commands using a closed buffer: %v, want ErrClosed", err)
	}
	cmds.Close()
	in.Close() // twice is fine
	closeTestDevice(t, inst, dev, before)
}

// TestObjectsAfterDeviceClose: the device's Close frees every object made
// on it, open commands included; each object's own Close afterwards is a
// no-op and every use returns ErrClosed.
func TestObjectsAfterDeviceClose(t *testing.T) {
	inst, dev, k, before := openSelftest(t)
	in, out, set := selftestBuffers(t, dev, k, 64)
	neverRun := recordSelftest(t, dev, k, set, selftestPush(1, 64), 1)
	finished := recordSelftest(t, dev, k, set, selftestPush(1, 64), 1)
	submitAndWait(t, finished)
	inFlight := recordSelftest(t, dev, k, set, selftestPush(1, 64), 1)
	if err := inFlight.Submit(); err != nil {
		t.Fatal(err)
	}
	closeTestDevice(t, inst, dev, before)
	for _, c := range []*Commands{neverRun, finished, inFlight} {
		if err := c.Submit(); !errors.Is(err, ErrClosed) {
			t.Errorf("Submit after the device's Close: %v, want ErrClosed", err)
		}
		if err := c.Wait(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("Wait after the device's Close: %v, want ErrClosed", err)
		}
		c.Close()
	}
	if err := out.Read(0, make([]byte, 4)); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after the device's Close: %v, want ErrClosed", err)
	}
	if _, err := dev.NewBuffer(16); !errors.Is(err, ErrClosed) {
		t.Errorf("NewBuffer after the device's Close: %v, want ErrClosed", err)
	}
	set.Close()
	k.Close()
	in.Close()
	out.Close()
	if n := LiveObjects(); n != before {
		t.Errorf("%d Vulkan objects alive after closing everything, want %d", n, before)
	}
}

// TestConcurrentRecordingAndSubmission: goroutines record, submit and wait
// on one device at once, each with its own buffers and one input shared by
// all, and check their results; run under -race by `make test`.
func TestConcurrentRecordingAndSubmission(t *testing.T) {
	inst, dev, k, before := openSelftest(t)
	const n = 256
	shared, err := dev.NewBuffer(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	if err := shared.WriteFloat32(0, x); err != nil {
		t.Fatal(err)
	}
	if err := parallel.Start(8, func(g int) error {
		return selftestRounds(dev, k, shared, x, float32(g+1), 20)
	})(); err != nil {
		t.Error(err)
	}
	closeTestDevice(t, inst, dev, before)
}

// selftestRounds binds in to a buffer of its own, runs the selftest kernel
// with factor rounds times and checks every output.
func selftestRounds(dev *Device, k *Kernel, in *Buffer, x []float32, factor float32, rounds int) error {
	n := uint32(len(x))
	for r := 0; r < rounds; r++ {
		out, err := dev.NewBuffer(uint64(4 * n))
		if err != nil {
			return err
		}
		set, err := k.Bind([]Arg{{Buffer: in}, {Buffer: out}})
		if err != nil {
			return err
		}
		c, err := selftestCommands(dev, k, set, selftestPush(factor, n), (n+63)/64)
		if err == nil {
			if err = c.Submit(); err == nil {
				err = c.Wait(context.Background())
			}
		}
		c.Close()
		set.Close()
		if err != nil {
			out.Close()
			return err
		}
		got := make([]float32, n)
		err = out.ReadFloat32(0, got)
		out.Close()
		if err != nil {
			return err
		}
		for i, g := range got {
			if want := x[i]*factor + 7; g != want {
				return fmt.Errorf("factor %v round %d: out[%d] = %v, want %v", factor, r, i, g, want)
			}
		}
	}
	return nil
}

// TestNoDriverMessage: with no driver to load (VK_ICD_FILENAMES naming no
// file, in a child process) the error says so and how to get one.
func TestNoDriverMessage(t *testing.T) {
	if os.Getenv("VKATTN_SUBPROCESS") != t.Name() {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "VKATTN_SUBPROCESS="+t.Name(),
			"VK_ICD_FILENAMES=/nonexistent/icd.json", "VK_DRIVER_FILES=/nonexistent/icd.json")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("%s in a subprocess: %v\n%s", t.Name(), err, out)
		}
		return
	}
	inst, err := NewInstance(InstanceConfig{})
	if err == nil {
		_, err = inst.DefaultDevice()
		inst.Close()
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("no driver: %v, want ErrNoDriver", err)
	}
	for _, want := range []string{"no Vulkan driver", "mesa-vulkan-drivers", "VK_ICD_FILENAMES"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no-driver error %q does not mention %q", err, want)
		}
	}
	t.Log(err)
}
