package faults_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/vk"
)

func TestMain(m *testing.M) { devtest.Main(m) }

// results are the failures injected, each with the sentinel a caller
// gets for it (SEMANTICS.md §9.4).
var results = []struct {
	result vulkan.Result
	want   error
}{
	{vulkan.ErrorDeviceLost, vkattn.ErrDeviceLost},
	{vulkan.ErrorOutOfDeviceMemory, vkattn.ErrTooLarge},
	{vulkan.ErrorOutOfHostMemory, vkattn.ErrTooLarge},
	{vulkan.ErrorInitializationFailed, vkattn.ErrDevice},
}

// scenario is representative work on an open device; it returns the
// first error and frees what it made.
type scenario struct {
	name string
	run  func(d *vkattn.Device) error
}

func upload(d *vkattn.Device, shape []int, seed uint64) (*vkattn.Tensor, error) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return d.Upload(shape, x)
}

// qkv uploads Q, K and V of a problem and hands them to f.
func qkv(d *vkattn.Device, h, hkv, l, s, dk int, f func(q, k, v *vkattn.Tensor) error) error {
	var ts [3]*vkattn.Tensor
	for i, shape := range [][]int{{1, h, l, dk}, {1, hkv, s, dk}, {1, hkv, s, dk}} {
		t, err := upload(d, shape, uint64(i))
		if err != nil {
			return err
		}
		defer t.Close()
		ts[i] = t
	}
	return f(ts[0], ts[1], ts[2])
}

func download(t *vkattn.Tensor) error {
	_, err := t.Download()
	return err
}

var scenarios = []scenario{
	{"upload and download", func(d *vkattn.Device) error {
		t, err := upload(d, []int{2, 3, 8}, 1)
		if err != nil {
			return err
		}
		defer t.Close()
		return download(t)
	}},
	{"one-shot call", func(d *vkattn.Device) error {
		return qkv(d, 2, 2, 3, 5, 8, func(q, k, v *vkattn.Tensor) error {
			out, err := d.Attention(q, k, v, vkattn.Options{Causal: vkattn.CausalBottomRight})
			if err != nil {
				return err
			}
			defer out.Close()
			return download(out.O)
		})
	}},
	{"prepared call", func(d *vkattn.Device) error {
		return qkv(d, 2, 1, 2, 9, 8, func(q, k, v *vkattn.Tensor) error {
			call, err := d.Prepare(q, k, v, vkattn.Options{WantLSE: true})
			if err != nil {
				return err
			}
			defer call.Close()
			for range 2 {
				if _, err := call.Run(context.Background()); err != nil {
					return err
				}
			}
			return download(call.Output().O)
		})
	}},
	{"split-K decode", func(d *vkattn.Device) error {
		return qkv(d, 4, 1, 1, 512, 16, func(q, k, v *vkattn.Tensor) error {
			out, err := d.Attention(q, k, v, vkattn.Options{})
			if err != nil {
				return err
			}
			defer out.Close()
			if out.Plan.Kernel.Splits == 0 {
				return fmt.Errorf("the decode call is not split over its keys: %v", out.Plan)
			}
			return download(out.O)
		})
	}},
	{"KV-cache decode step and fork", func(d *vkattn.Device) error {
		cache, err := kv.New(d, kv.Config{B: 2, HKV: 1, Capacity: 16, DK: 8, DV: 8, PageSize: 4})
		if err != nil {
			return err
		}
		defer cache.Close()
		if err := cache.AppendTo(0, make([]float32, 3*8), make([]float32, 3*8), 3); err != nil {
			return err
		}
		if err := cache.Fork(0, 1); err != nil {
			return err
		}
		step, err := cache.PrepareStep(2, vkattn.Options{})
		if err != nil {
			return err
		}
		defer step.Close()
		o := make([]float32, 2*2*8)
		_, err = step.Run(context.Background(), make([]float32, 2*8), make([]float32, 2*8), make([]float32, 2*2*8), o)
		return err
	}},
	{"merge", func(d *vkattn.Device) error {
		return qkv(d, 2, 2, 3, 5, 8, func(q, k, v *vkattn.Tensor) error {
			out, err := d.Attention(q, k, v, vkattn.Options{WantLSE: true})
			if err != nil {
				return err
			}
			defer out.Close()
			m, err := d.Merge([]vkattn.Part{out.Part(), out.Part()})
			if err != nil {
				return err
			}
			defer m.Close()
			return download(m.O)
		})
	}},
	{"backward", func(d *vkattn.Device) error {
		return qkv(d, 2, 1, 3, 5, 8, func(q, k, v *vkattn.Tensor) error {
			dO, err := upload(d, []int{1, 2, 3, 8}, 7)
			if err != nil {
				return err
			}
			defer dO.Close()
			g, err := d.AttentionBackward(q, k, v, dO, vkattn.Options{})
			if err != nil {
				return err
			}
			defer g.Close()
			return download(g.DQ)
		})
	}},
	{"MHA layer forward and backward", func(d *vkattn.Device) error {
		const dm = 8
		r := rand.New(rand.NewPCG(3, 4))
		w := func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64()) / 4
			}
			return x
		}
		m, err := nn.NewMHA(d, &nn.MHAWeights{DModel: dm, KDim: dm, VDim: dm, InProjWeight: w(3 * dm * dm), InProjBias: w(3 * dm), OutProjWeight: w(dm * dm), OutProjBias: w(dm)})
		if err != nil {
			return err
		}
		defer m.Close()
		x, err := upload(d, []int{1, 3, dm}, 5)
		if err != nil {
			return err
		}
		defer x.Close()
		out, err := m.Forward(x, nil, nil, nn.MHAOptions{Heads: 2})
		if err != nil {
			return err
		}
		defer out.Close()
		g, err := m.Backward(x, nil, nil, out.Out, nn.MHAOptions{Heads: 2})
		if err != nil {
			return err
		}
		defer g.Close()
		return download(g.DX)
	}},
}

// config is the device every point opens: lavapipe's plan, and the
// validation layer as the suite has it.
var config = vkattn.Config{Validation: true}

// firstOfEachSite are the 1-based indices of the calls in sites (as
// vk.FaultSites lists them) that are the first made at their site.
func firstOfEachSite(sites []string) []int {
	var first []int
	seen := map[string]bool{}
	for i, s := range sites {
		if !seen[s] {
			seen[s] = true
			first = append(first, i+1)
		}
	}
	return first
}

// sweep fails each call of points (1-based, counted as the work makes
// them) in turn with the results in turn (rotation counts across
// sweeps), and with a lost device besides where lost[i] and the turn
// gave another result; it checks what follows.
func sweep(t *testing.T, name string, points []int, lost map[int]bool, at func(t *testing.T, fault *vk.Fault) (err error, d *vkattn.Device)) {
	for _, i := range points {
		turn := results[rotation%len(results)]
		rotation++
		injected := []struct {
			result vulkan.Result
			want   error
		}{turn}
		if lost[i] && turn.result != vulkan.ErrorDeviceLost {
			injected = append(injected, results[0])
		}
		for _, res := range injected {
			t.Run(fmt.Sprintf("%s/call %d/%v", name, i, vulkan.Error(res.result)), func(t *testing.T) {
				goroutines := runtime.NumGoroutine()
				err, d := at(t, &vk.Fault{Nth: i, Result: res.result})
				if err != nil && !errors.Is(err, res.want) {
					t.Errorf("error %v, want one wrapping %v", err, res.want)
				}
				if d != nil {
					switch {
					case err != nil && res.result == vulkan.ErrorDeviceLost:
						// Every later use fails at once, with the same error.
						start := time.Now()
						if _, err := d.Upload([]int{1, 4}, make([]float32, 4)); !errors.Is(err, vkattn.ErrDeviceLost) {
							t.Errorf("an upload after the device was lost: %v, want ErrDeviceLost", err)
						}
						if time.Since(start) > time.Second {
							t.Errorf("an upload after the device was lost took %v", time.Since(start))
						}
					case err != nil:
						// Out of memory (or a call failing) in one call: the
						// device stays usable for the next.
						if err := scenarios[1].run(d); err != nil {
							t.Errorf("the next call after %v: %v", err, err)
						}
					}
					d.Close()
				}
				if n := vkattn.LiveObjects(); n != liveBefore {
					t.Errorf("%d Vulkan objects alive after Close, want %d", n, liveBefore)
				}
				settled := time.Now().Add(2 * time.Second)
				for runtime.NumGoroutine() > goroutines && time.Now().Before(settled) {
					time.Sleep(10 * time.Millisecond)
				}
				if n := runtime.NumGoroutine(); n > goroutines {
					t.Errorf("%d goroutines after Close, %d before", n, goroutines)
				}
			})
		}
	}
}

// rotation is the turn of the next injected result.
var rotation int

// liveBefore is what the suite's shared devices keep alive.
var liveBefore int64

// TestFaults makes each Vulkan call of opening a device, of each scenario
// and of closing the device fail in turn: each failure reaches the
// caller as an error wrapping its sentinel (ErrDeviceLost, ErrTooLarge
// for out of memory, ErrDevice for another failure) or is absorbed; a
// lost device refuses every later use at once; a device whose call ran
// out of memory takes the next call; nothing panics, nothing is left
// alive after Close, no goroutine is left.
func TestFaults(t *testing.T) {
	liveBefore = vkattn.LiveObjects()
	// Every site fails with a lost device at least once: in the first
	// piece of work that reaches it.
	sites := map[string]bool{}
	var lost map[int]bool
	count := func(f func()) []int {
		vk.SetFault(&vk.Fault{Nth: -1})
		f()
		vk.SetFault(nil)
		calls := vk.FaultSites()
		first := firstOfEachSite(calls)
		lost = map[int]bool{}
		for _, i := range first {
			if s := calls[i-1]; !sites[s] {
				sites[s], lost[i] = true, true
			}
		}
		return first
	}
	total := 0
	opens := count(func() {
		d, err := vkattn.Open(config)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
	})
	total += len(opens)
	sweep(t, "open", opens, lost, func(t *testing.T, fault *vk.Fault) (error, *vkattn.Device) {
		vk.SetFault(fault)
		d, err := vkattn.Open(config)
		vk.SetFault(nil)
		if err != nil {
			return err, nil
		}
		return nil, d
	})
	for _, s := range scenarios {
		d, err := vkattn.Open(config)
		if err != nil {
			t.Fatal(err)
		}
		var runErr error
		n := count(func() { runErr = s.run(d) })
		d.Close()
		if runErr != nil {
			t.Fatalf("%s without a fault: %v", s.name, runErr)
		}
		total += len(n)
		sweep(t, s.name, n, lost, func(t *testing.T, fault *vk.Fault) (err error, d *vkattn.Device) {
			if d, err = vkattn.Open(config); err != nil {
				t.Fatal(err)
			}
			defer func() {
				vk.SetFault(nil)
				if r := recover(); r != nil {
					t.Errorf("panic: %v", r)
				}
			}()
			vk.SetFault(fault)
			err = s.run(d)
			vk.SetFault(nil)
			return err, d
		})
	}
	closes := count(func() {
		d, err := vkattn.Open(config)
		if err != nil {
			t.Fatal(err)
		}
		scenarios[1].run(d)
		vk.SetFault(&vk.Fault{Nth: -1}) // the count starts at Close
		d.Close()
	})
	total += len(closes)
	sweep(t, "close", closes, lost, func(t *testing.T, fault *vk.Fault) (error, *vkattn.Device) {
		d, err := vkattn.Open(config)
		if err != nil {
			t.Fatal(err)
		}
		if err := scenarios[1].run(d); err != nil {
			t.Fatal(err)
		}
		vk.SetFault(fault)
		err = d.Close()
		vk.SetFault(nil)
		return err, nil
	})
	t.Logf("%d injection points (the first call of each site in each piece of work) over %d call sites, each failed with a lost device once", total, len(sites))
	names := slices.Sorted(maps.Keys(sites))
	t.Logf("the sites: %s", strings.Join(names, "; "))
}
