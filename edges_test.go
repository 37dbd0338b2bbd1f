package vkattn_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// Soft-capping is float32-accurate for every cap the options accept: a cap
// far above the scores leaves them as they are (tanh of a small argument
// computed from exp would keep few of its bits), and the smallest caps
// flatten them, on the row and the tiled kernels.
func TestSoftcapAccurateForEveryCap(t *testing.T) {
	r := rand.New(rand.NewSource(61))
	caps := []float64{1e4, 1e7, 1e20, math.MaxFloat32, 0x1p-126, 1e-30, 2.5}
	for _, plan := range devtest.OwnAndNVIDIA {
		var names []string
		var problems []*devtest.Problem
		for _, c := range caps {
			p := devtest.NewProblem(r, 1, 2, 1, 5, 12, 8, 8)
			for i := range p.Q {
				p.Q[i] *= 4 // scores of a few units, where the cap's error showed
			}
			p.Opts.Softcap = c
			p.WantLSE = true
			names = append(names, fmt.Sprintf("cap%g", c))
			problems = append(problems, p)
		}
		t.Run(plan, func(t *testing.T) { runInCompileOrder(t, devtest.EveryPlan()[plan], names, problems) })
	}
}

// Window sides beyond 32 bits (and up to the largest int) mean what they
// say: a side of at least L + S keys shows every key on its side, on the
// device and in the reference, also when L > S puts queries before the
// first key.
func TestWindowSidesOfAnyInt(t *testing.T) {
	r := rand.New(rand.NewSource(62))
	for _, c := range []struct {
		name        string
		l, s        int
		left, right int
		same        vkattn.Window // the window it equals
	}{
		{"left 2^32", 6, 9, 1 << 32, 0, vkattn.Window{Left: -1, Right: 0}},
		{"right 2^32", 6, 9, 2, 1 << 32, vkattn.Window{Left: 2, Right: -1}},
		{"both max int", 6, 9, math.MaxInt, math.MaxInt, vkattn.Window{Left: -1, Right: -1}},
		{"max int32, L > S", 9, 5, math.MaxInt32, 1, vkattn.Window{Left: -1, Right: 1}},
		{"max int, L > S", 9, 5, 0, math.MaxInt, vkattn.Window{Left: 0, Right: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := devtest.NewProblem(r, 1, 2, 2, c.l, c.s, 8, 8)
			p.Opts.Window = &vkattn.Window{Left: c.left, Right: c.right}
			p.WantLSE = true
			want := devtest.RunReference(t, p)
			same := *p
			same.Opts.Window = &c.same
			if err := devtest.CloseTo(toFloat32(want.O), devtest.RunReference(t, &same).O); err != nil {
				t.Fatalf("reference: window (%d, %d) differs from %v: %v", c.left, c.right, c.same, err)
			}
			got := devtest.RunGPU(t, devtest.Dev, p)
			devtest.Compare(t, "O", got.O, want.O)
			devtest.Compare(t, "LSE", got.LSE, want.LSE)
		})
	}
}

func toFloat32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// No value of an exported enum panics: String names an unknown one, and
// options, configs and tunings holding one are errors wrapping their
// sentinel.
func TestEnumsOutsideTheirSets(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{vkattn.LoadPath(5).String(), "LoadPath(5)"},
		{vkattn.LoadPath(-1).String(), "LoadPath(-1)"},
		{vkattn.Causal(7).String(), "Causal(7)"},
		{vkattn.DType(9).String(), "DType(9)"},
		{vkattn.MaskMeaning(4).String(), "MaskMeaning(4)"},
		{vkattn.DeviceInfo{Type: 17}.Type.String(), "DeviceType(17)"},
		{vkattn.MemoryModel(3).String(), "MemoryModel(3)"},
	} {
		if c.got != c.want {
			t.Errorf("String of an unknown value: %q, want %q", c.got, c.want)
		}
	}
	for _, cfg := range []vkattn.Config{{LoadPath: 5}, {LoadPath: -1}, {PlanAs: "cray"}, {Memory: 2}, {Memory: -1}} {
		if d, err := vkattn.Open(cfg); !errors.Is(err, vkattn.ErrOption) {
			if d != nil {
				d.Close()
			}
			t.Errorf("Open(%+v): %v, want ErrOption", cfg, err)
		}
	}
	q := devtest.Upload(t, devtest.Dev, []int{1, 1, 2, 4}, make([]float32, 8))
	// CheckProblem refuses bad options (TestOptionErrorsWrapSentinels);
	// the device's calls go through it.
	if _, err := devtest.Dev.Attention(q, q, q, vkattn.Options{Causal: 3}); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("Causal(3): %v, want ErrOption", err)
	}
	if _, err := devtest.Dev.UploadAs([]int{1, 4}, make([]float32, 4), vkattn.DType(99)); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("UploadAs(DType(99)): %v, want ErrOption", err)
	}
	if _, err := kv.New(devtest.Dev, kv.Config{B: 1, HKV: 1, Capacity: 4, DK: 4, DV: 4, DType: 7}); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("kv.New(DType(7)): %v, want ErrOption", err)
	}
	bad := devtest.Dev.Tuning()
	bad.Path = 6
	if err := devtest.Dev.SetTuning(bad); !errors.Is(err, vkattn.ErrTuning) {
		t.Errorf("SetTuning with path %v: %v, want ErrTuning", bad.Path, err)
	}
}

// Extents whose products overflow an int, or that no tensor of the cache
// could hold, are ErrTooLarge, not a panic or a wrapped-around count.
func TestExtentsThatOverflow(t *testing.T) {
	for _, s := range [][]int{{1 << 32, 1 << 32}, {1 << 40, 1 << 40}, {1 << 31, 1 << 31, 4}, {math.MaxInt, 2}} {
		if _, err := vkattn.Shape4(s); !errors.Is(err, vkattn.ErrTooLarge) {
			t.Errorf("Shape4(%v): %v, want ErrTooLarge", s, err)
		}
	}
	if _, err := devtest.Dev.Upload([]int{1 << 32, 1 << 32}, nil); !errors.Is(err, vkattn.ErrTooLarge) {
		t.Errorf("Upload of 2^64 elements and no data: %v, want ErrTooLarge", err)
	}
	if _, err := devtest.Dev.Upload([]int{1 << 40, 1 << 40}, make([]float32, 4)); !errors.Is(err, vkattn.ErrTooLarge) {
		t.Errorf("Upload of 2^80 elements: %v, want ErrTooLarge", err)
	}
	base := kv.Config{B: 1, HKV: 4, Capacity: 4, DK: 8, DV: 8}
	for _, c := range []struct {
		name string
		set  func(*kv.Config)
	}{
		{"B 2^62", func(c *kv.Config) { c.B = 1 << 62 }},
		{"HKV 2^62", func(c *kv.Config) { c.HKV = 1 << 62 }},
		{"Capacity max int", func(c *kv.Config) { c.Capacity = math.MaxInt }},
		{"DK 2^40", func(c *kv.Config) { c.DK = 1 << 40 }},
		{"B and Capacity 2^32", func(c *kv.Config) { c.B, c.Capacity = 1<<32, 1<<32 }},
		{"paged, max int capacity", func(c *kv.Config) { c.Capacity, c.PageSize = math.MaxInt, 16 }},
		{"pages max int", func(c *kv.Config) { c.PageSize, c.Pages = 16, math.MaxInt }},
		{"page size 2^62", func(c *kv.Config) { c.PageSize = 1 << 62 }},
	} {
		cfg := base
		c.set(&cfg)
		if cache, err := kv.New(devtest.Dev, cfg); !errors.Is(err, vkattn.ErrTooLarge) {
			if cache != nil {
				cache.Close()
			}
			t.Errorf("kv.New, %s: %v, want ErrTooLarge", c.name, err)
		}
	}
	if s := vkattn.ALiBiSlopes(1 << 40); s != nil {
		t.Errorf("ALiBiSlopes(2^40): %d slopes, want nil (beyond MaxALiBiHeads)", len(s))
	}
	if s := vkattn.ALiBiSlopes(vkattn.MaxALiBiHeads + 1); s != nil {
		t.Errorf("ALiBiSlopes(MaxALiBiHeads+1): %d slopes, want nil", len(s))
	}
}

// A device whose memory is used up says so: an allocation beyond a heap's
// room (here MemoryLimit's) is ErrTooLarge naming the heap, and the device
// stays usable.
func TestFullHeapIsErrTooLarge(t *testing.T) {
	d, err := vkattn.Open(vkattn.Config{Validation: true, MemoryLimit: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var held []*vkattn.Tensor
	defer func() {
		for _, x := range held {
			x.Close()
		}
	}()
	chunk := make([]float32, 256<<10) // 1 MiB
	for i := 0; i < 8 && err == nil; i++ {
		var x *vkattn.Tensor
		if x, err = d.Upload([]int{512, 512}, chunk); err == nil {
			held = append(held, x)
		}
	}
	if !errors.Is(err, vkattn.ErrTooLarge) || !strings.Contains(err.Error(), "heap") {
		t.Fatalf("uploads past a 4 MiB limit: %v, want ErrTooLarge naming the heap", err)
	}
	if len(held) > 4 {
		t.Errorf("%d MiB held under a 4 MiB limit", len(held))
	}
	held[0].Close()
	held = held[1:]
	p := devtest.NewProblem(rand.New(rand.NewSource(63)), 1, 1, 1, 3, 4, 4, 4)
	devtest.CheckAgainstReference(t, d, p)
}

// After Device.Close every method of the device and of everything made on
// it returns an error wrapping ErrClosed: none succeeds, none reports
// another cause (a cache's lengths, a bare vk error) or nil.
func TestEveryMethodAfterDeviceClose(t *testing.T) {
	d, err := vkattn.Open(vkattn.Config{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(64))
	q := devtest.MustUpload(t, d, []int{1, 2, 1, 8}, devtest.RandomValues(r, 16))
	cache, err := kv.New(d, kv.Config{B: 1, HKV: 1, Capacity: 8, DK: 8, DV: 8})
	if err != nil {
		t.Fatal(err)
	}
	k1, v1 := devtest.MustUpload(t, d, []int{1, 1, 1, 8}, devtest.RandomValues(r, 8)), devtest.MustUpload(t, d, []int{1, 1, 1, 8}, devtest.RandomValues(r, 8))
	if err := cache.AppendTensors(k1, v1); err != nil {
		t.Fatal(err)
	}
	call, err := cache.Prepare(q, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	step := devtest.PrepareStep(t, cache, 2, vkattn.Options{})
	mha, err := nn.NewMHA(d, devtest.RandomMHA(r, 8, 8, 8, true))
	if err != nil {
		t.Fatal(err)
	}
	x := devtest.MustUpload(t, d, []int{1, 3, 8}, devtest.RandomValues(r, 24))
	mcall, err := mha.Prepare(x, nil, nil, nn.MHAOptions{Heads: 2})
	if err != nil {
		t.Fatal(err)
	}
	aw := &nn.AdditiveWeights{DQ: 8, DK: 8, DA: 4, WQ: devtest.RandomValues(r, 32), WK: devtest.RandomValues(r, 32), WA: devtest.RandomValues(r, 4)}
	add, err := nn.NewAdditive(d, aw)
	if err != nil {
		t.Fatal(err)
	}
	tuning := d.Tuning()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	bg := context.Background()
	one := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	shape := []int{1, 1, 1, 8}
	qs := []int{1, 2, 1, 8}
	for name, f := range map[string]func() error{
		"Device.Plan":       func() error { _, err := d.Plan(qs, shape, shape, vkattn.Options{}); return err },
		"Device.PlanAs":     func() error { _, err := d.PlanAs(qs, shape, shape, [3]vkattn.DType{}, vkattn.Options{}); return err },
		"Device.SetTuning":  func() error { return d.SetTuning(tuning) },
		"Device.SaveTuning": func() error { _, err := d.SaveTuning(tuning); return err },
		"Device.Upload":     func() error { _, err := d.Upload(shape, one); return err },
		"Device.UploadAs":   func() error { _, err := d.UploadAs(shape, one, vkattn.Float16); return err },
		"Device.UploadBits": func() error { _, err := d.UploadBits(shape, make([]uint16, 8), vkattn.BFloat16); return err },
		"Device.Attention":  func() error { _, err := d.Attention(q, k1, v1, vkattn.Options{}); return err },
		"Device.AttentionVarlen": func() error {
			_, err := d.AttentionVarlen(q, k1, v1, []int{0, 1}, []int{0, 1}, vkattn.Options{})
			return err
		},
		"Device.Prepare":         func() error { _, err := d.Prepare(q, k1, v1, vkattn.Options{}); return err },
		"kv.New":                 func() error { _, err := kv.New(d, cache.Config()); return err },
		"nn.NewMHA":              func() error { _, err := nn.NewMHA(d, devtest.RandomMHA(r, 8, 8, 8, false)); return err },
		"nn.NewAdditive":         func() error { _, err := nn.NewAdditive(d, aw); return err },
		"kv.Cache.Append":        func() error { return cache.Append(one, one, 1) },
		"kv.Cache.AppendTo":      func() error { return cache.AppendTo(0, one, one, 1) },
		"kv.Cache.AppendTensors": func() error { return cache.AppendTensors(k1, v1) },
		"kv.Cache.Truncate":      func() error { return cache.Truncate([]int{0}) },
		"kv.Cache.Reset":         func() error { return cache.Reset() },
		"kv.Cache.Attention":     func() error { _, err := cache.Attention(q, vkattn.Options{}); return err },
		"kv.Cache.Prepare":       func() error { _, err := cache.Prepare(q, vkattn.Options{}); return err },
		"Call.Run":               func() error { _, err := call.Run(bg); return err },
		"kv.Cache.PrepareStep":   func() error { _, err := cache.PrepareStep(2, vkattn.Options{}); return err },
		"kv.DecodeStep.Run":      func() error { _, err := step.Run(bg, one, one, make([]float32, 16), make([]float32, 16)); return err },
		"kv.DecodeStep.Plan":     func() error { _, err := step.Plan(); return err },
		"nn.MHA.Plan":            func() error { _, err := mha.Plan([]int{1, 3, 8}, nil, nil, nn.MHAOptions{Heads: 2}); return err },
		"nn.MHA.Forward":         func() error { _, err := mha.Forward(x, nil, nil, nn.MHAOptions{Heads: 2}); return err },
		"nn.MHA.Prepare":         func() error { _, err := mha.Prepare(x, nil, nil, nn.MHAOptions{Heads: 2}); return err },
		"nn.MHACall.Run":         func() error { _, err := mcall.Run(bg); return err },
		"nn.Additive.Plan":       func() error { _, err := add.Plan([]int{3, 8}, []int{4, 8}, []int{4, 8}, vkattn.Options{}); return err },
		"nn.Additive.Attention":  func() error { _, err := add.Attention(x, x, x, vkattn.Options{}); return err },
		"nn.Additive.Prepare":    func() error { _, err := add.Prepare(x, x, x, vkattn.Options{}); return err },
		"Tensor.Download":        func() error { _, err := q.Download(); return err },
		"Tensor.Write":           func() error { return q.Write(make([]float32, 16)) },
		"Tensor.Buffer":          func() error { _, err := q.Buffer(); return err },
		"Tensor.At":              func() error { _, err := q.At(0, 0, 0, 0); return err },
	} {
		if err := f(); !errors.Is(err, vkattn.ErrClosed) {
			t.Errorf("%s after Device.Close: %v, want ErrClosed", name, err)
		}
	}
	call.Close()
	step.Close()
	mcall.Close()
	mha.Close()
	add.Close()
	cache.Close()
}

// A cap below float32's smallest normal, which a device may flush to zero,
// is refused by the device and the reference alike.
func TestSubnormalSoftcapRefused(t *testing.T) {
	p := devtest.NewProblem(rand.New(rand.NewSource(65)), 1, 1, 1, 2, 3, 4, 4)
	p.Opts.Softcap = 1e-40
	if _, err := reference.Attention(p.Q, p.QS, p.K, p.KS, p.V, p.VS, p.Opts); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("reference with softcap 1e-40: %v, want ErrOption", err)
	}
	if _, err := devtest.Dev.Attention(devtest.Upload(t, devtest.Dev, p.QS[:], p.Q), devtest.Upload(t, devtest.Dev, p.KS[:], p.K), devtest.Upload(t, devtest.Dev, p.VS[:], p.V), p.Opts); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("device with softcap 1e-40: %v, want ErrOption", err)
	}
}
