package vk

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vkattn/vkattn/shaders"
)

// TestCallsSurviveGC makes every call that passes nested create infos
// (instance, device, shader module, layouts, pipeline, descriptor pool and
// writes, submit, barrier, copy) while another goroutine collects garbage
// without pause. Through vulkan-go's own conversions this crashed within a
// few pipeline creations (their C memory is freed by a finalizer that a
// collection can run mid-call); each result is checked as well.
func TestCallsSurviveGC(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()

	code, err := shaders.SPIRV("selftest")
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	for round := 0; round < 3; round++ {
		inst, dev, _ := openTestDevice(t)
		in, err1 := dev.NewBuffer(4 * n)
		out, err2 := dev.NewBuffer(4 * n)
		copied, err3 := dev.NewBuffer(4 * n)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatal(err1, err2, err3)
		}
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i)
		}
		if err := in.WriteFloat32(0, x); err != nil {
			t.Fatal(err)
		}
		push := selftestPush(2, n)
		for add := int32(0); add < 30; add++ {
			k, err := dev.NewKernel(KernelSpec{
				Name: "selftest", SPIRV: code, Bindings: []BindingType{StorageBuffer, StorageBuffer},
				Spec: []SpecConstant{{ID: 0, Value: add}}, PushSize: 8,
			})
			if err != nil {
				t.Fatal(err)
			}
			set, err := k.Bind([]Arg{{Buffer: in}, {Buffer: out}})
			if err != nil {
				t.Fatal(err)
			}
			cmds := recordSelftest(t, dev, k, set, push, 1)
			submitAndWait(t, cmds)
			cmds.Close()
			if err := dev.copyNow(out, 0, copied, 0, 4*n); err != nil {
				t.Fatal(err)
			}
			got := readFloats(t, copied, n)
			for i, g := range got {
				if want := 2*x[i] + float32(add); g != want {
					t.Fatalf("round %d, SPEC_ADD %d: out[%d] = %v, want %v", round, add, i, g, want)
				}
			}
			k.Close()
		}
		if err := dev.Close(); err != nil {
			t.Fatal(err)
		}
		inst.Close()
	}
	if msgs := ValidationMessages(); len(msgs) > 0 {
		t.Errorf("validation messages:\n%v", msgs)
	}
}
