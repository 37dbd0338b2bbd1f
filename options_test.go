package vkattn_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
)

// sentinels are every sentinel error of errors.go.
var sentinels = []error{
	vkattn.ErrShape, vkattn.ErrHeads, vkattn.ErrMask, vkattn.ErrLengths, vkattn.ErrScale,
	vkattn.ErrOption, vkattn.ErrEmpty, vkattn.ErrNonFinite, vkattn.ErrOverflow,
	vkattn.ErrTooLarge, vkattn.ErrClosed, vkattn.ErrDevice, vkattn.ErrDeviceLost, vkattn.ErrTuning,
}

// sentinelsIn lists the sentinels err wraps.
func sentinelsIn(err error) []error {
	var in []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			in = append(in, s)
		}
	}
	return in
}

// TestOptionErrorsWrapSentinels: every bad option CheckProblem refuses
// wraps exactly its sentinel, on the host, before any device work.
func TestOptionErrorsWrapSentinels(t *testing.T) {
	q, k := [4]int{2, 2, 3, 4}, [4]int{2, 2, 5, 4}
	keys := func(meaning vkattn.MaskMeaning) vkattn.BoolMask {
		return vkattn.BoolMask{Shape: vkattn.MaskShape{1, 1, 1, 5}, Values: make([]bool, 5), Meaning: meaning}
	}
	for _, c := range []struct {
		name string
		opts vkattn.Options
		want error
	}{
		{"causal 7", vkattn.Options{Causal: 7}, vkattn.ErrOption},
		{"causal -1", vkattn.Options{Causal: -1}, vkattn.ErrOption},
		{"NaN scale", vkattn.Options{Scale: vkattn.CustomScale(math.NaN())}, vkattn.ErrScale},
		{"infinite scale", vkattn.Options{Scale: vkattn.CustomScale(math.Inf(-1))}, vkattn.ErrScale},
		// float32 holds at most 3.4028e38: the kernels would scale by +Inf.
		{"scale 1e39", vkattn.Options{Scale: vkattn.CustomScale(1e39)}, vkattn.ErrScale},
		{"scale 3.5e38", vkattn.Options{Scale: vkattn.CustomScale(3.5e38)}, vkattn.ErrScale},
		{"scale 1e308", vkattn.Options{Scale: vkattn.CustomScale(1e308)}, vkattn.ErrScale},
		{"scale -1e39", vkattn.Options{Scale: vkattn.CustomScale(-1e39)}, vkattn.ErrScale},
		{"first bool mask meaning unset", vkattn.Options{BoolMasks: []vkattn.BoolMask{keys(0), keys(vkattn.TrueAllows)}}, vkattn.ErrMask},
		{"second bool mask meaning unknown", vkattn.Options{BoolMasks: []vkattn.BoolMask{keys(vkattn.TrueAllows), keys(9)}}, vkattn.ErrMask},
		{"second bool mask value count", vkattn.Options{BoolMasks: []vkattn.BoolMask{keys(vkattn.TrueBlocks), {Shape: vkattn.MaskShape{2, 1, 1, 5}, Values: make([]bool, 5), Meaning: vkattn.TrueBlocks}}}, vkattn.ErrMask},
		{"mask shape", vkattn.Options{Mask: &vkattn.Mask{Shape: vkattn.MaskShape{3, 1, 1, 5}, Values: make([]float32, 15)}}, vkattn.ErrMask},
		{"query lengths", vkattn.Options{QueryLengths: []int{1, 4}}, vkattn.ErrLengths},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := vkattn.CheckProblem(q, k, k, &c.opts)
			if in := sentinelsIn(err); len(in) != 1 || in[0] != c.want {
				t.Errorf("error %v wraps %v, want exactly %v", err, in, c.want)
			}
			// The options alone, against the problem's extents: the same error.
			if verr := c.opts.Validate(d); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate: %v, want CheckProblem's %v", verr, err)
			}
		})
	}
	// The largest float32 is a valid scale (the scores may still overflow
	// for given inputs: Prepare checks that, ErrOverflow).
	opts := vkattn.Options{Scale: vkattn.CustomScale(math.MaxFloat32)}
	if _, err := vkattn.CheckProblem(q, k, k, &opts); err != nil {
		t.Errorf("scale MaxFloat32: %v", err)
	}
	if _, err := vkattn.ParseCausal("diagonal"); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("ParseCausal(diagonal): %v, want ErrOption", err)
	}
}

// TestParseLoadPathReadsWhatStringPrints: the --load-path names, one parser
// for flags and saved tunings.
func TestParseLoadPathReadsWhatStringPrints(t *testing.T) {
	for _, p := range []vkattn.LoadPath{vkattn.AutoLoadPath, vkattn.TexelLoadPath, vkattn.StorageLoadPath} {
		if got, err := vkattn.ParseLoadPath(p.String()); err != nil || got != p {
			t.Errorf("ParseLoadPath(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := vkattn.ParseLoadPath("Texel"); !errors.Is(err, vkattn.ErrOption) || !strings.Contains(err.Error(), "want auto, texel or storage") {
		t.Errorf("ParseLoadPath(Texel): %v, want ErrOption naming the choices", err)
	}
}

// FuzzCheckProblem: option validation never panics, and every error it
// returns wraps exactly one sentinel. The bytes choose the masks and
// lengths: see fuzzOptions.
func FuzzCheckProblem(f *testing.F) {
	f.Add(2, 4, 3, 8, 2, 2, 5, 8, 2, 2, 5, 6, 0.5, true, 1, []byte{0x1f, 1, 1, 0, 1, 2, 0, 1, 1, 1, 1, 5, 3, 2})
	f.Add(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0.0, false, 0, []byte{})
	f.Add(1, 8, 1, 64, 1, 2, 300, 64, 1, 2, 300, 64, 1e39, true, 2, []byte{0x06, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 0})
	f.Add(3, 2, 4, 1, 3, 1, 4, 1, 3, 1, 4, 9, math.NaN(), true, 7, []byte{0x19, 1, 1, 1, 1, 255, 254, 3, 9, 9})
	f.Add(-1, 0, 1<<40, 1, 1, 1, 1<<62, 1, 1, 1, 1, 1, math.Inf(1), true, -3, []byte{0xff, 2, 2, 2, 2, 0})
	// Extents whose products wrap around int64: a mask of 2^32 x 2^32 values
	// must not pass as one of none.
	f.Add(1<<32, 1, 1, 1, 1<<32, 1, 1<<32, 1, 1<<32, 1, 1<<32, 1, 0.0, false, 0, []byte{0x01, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, q0, q1, q2, q3, k0, k1, k2, k3, v0, v1, v2, v3 int, scale float64, scaleSet bool, causal int, spec []byte) {
		q, k, v := [4]int{q0, q1, q2, q3}, [4]int{k0, k1, k2, k3}, [4]int{v0, v1, v2, v3}
		opts := fuzzOptions(q, k, spec)
		if scaleSet {
			opts.Scale = vkattn.CustomScale(scale)
		}
		opts.Causal = vkattn.Causal(causal)
		// Where the shapes pass, Validate and CheckProblem agree on the options.
		if d, err := vkattn.CheckProblem(q, k, v, nil); err == nil {
			_, perr := vkattn.CheckProblem(q, k, v, &opts)
			if verr := opts.Validate(d); fmt.Sprint(verr) != fmt.Sprint(perr) {
				t.Fatalf("Validate(%v): %v; CheckProblem: %v", d, verr, perr)
			}
		}
		if _, err := vkattn.CheckProblem(q, k, v, &opts); err != nil {
			if in := sentinelsIn(err); len(in) != 1 {
				t.Fatalf("error %q wraps %d sentinels %v, want exactly one", err, len(in), in)
			}
		} else {
			// Accepted masks hold exactly the values their shapes need
			// (counted in float64: an int product could wrap around).
			counts := map[string][2]float64{}
			if m := opts.Mask; m != nil {
				counts["additive"] = [2]float64{float64(len(m.Values)), float64(m.Shape[0]) * float64(m.Shape[1]) * float64(m.Shape[2]) * float64(m.Shape[3])}
			}
			for i, m := range opts.BoolMasks {
				counts[fmt.Sprint("boolean ", i)] = [2]float64{float64(len(m.Values)), float64(m.Shape[0]) * float64(m.Shape[1]) * float64(m.Shape[2]) * float64(m.Shape[3])}
			}
			for what, c := range counts {
				if c[0] != c[1] {
					t.Fatalf("%s mask accepted with %v values for a shape of %v", what, c[0], c[1])
				}
			}
		}
		if _, err := vkattn.Shape4(q[:1+len(spec)%4]); err != nil && len(sentinelsIn(err)) != 1 {
			t.Fatalf("Shape4 error %q wraps no single sentinel", err)
		}
	})
}

// fuzzOptions reads masks and lengths from spec. Its first byte says what
// is present (bit 0 an additive mask, bits 1-2 the number of boolean masks,
// bit 3 key lengths, bit 4 query lengths); each mask then takes four shape
// bytes (0: 1, 1: the full extent, else the byte itself), a count byte
// (0: as many values as the shape needs, else the byte) and for boolean
// masks a meaning byte; lengths take one byte per batch item, as int8.
func fuzzOptions(q, k [4]int, spec []byte) vkattn.Options {
	next := func() int {
		if len(spec) == 0 {
			return 0
		}
		b := spec[0]
		spec = spec[1:]
		return int(b)
	}
	full := [4]int{q[0], q[1], q[2], k[2]}
	mask := func() (vkattn.MaskShape, int) {
		var s vkattn.MaskShape
		n := 1
		for a := range s {
			switch b := next(); b {
			case 0:
				s[a] = 1
			case 1:
				s[a] = full[a]
			default:
				s[a] = b
			}
			if s[a] > 0 {
				n = min(n*min(s[a], 1<<13), 1<<13) // no overflow: at most 2^26
			}
		}
		if c := next(); c != 0 || n > 1<<12 {
			n = c
		}
		return s, n
	}
	var opts vkattn.Options
	flags := next()
	if flags&1 != 0 {
		s, n := mask()
		m := &vkattn.Mask{Shape: s, Values: make([]float32, n)}
		for i := range m.Values {
			m.Values[i] = []float32{0, -1, float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), math.MaxFloat32}[next()%6]
		}
		opts.Mask = m
	}
	for range (flags >> 1) & 3 {
		s, n := mask()
		opts.BoolMasks = append(opts.BoolMasks, vkattn.BoolMask{Shape: s, Values: make([]bool, n), Meaning: vkattn.MaskMeaning(next() % 4)})
	}
	lengths := func() []int {
		l := make([]int, max(0, min(q[0], 64)))
		for i := range l {
			l[i] = int(int8(next()))
		}
		return l
	}
	if flags&8 != 0 {
		opts.KeyLengths = lengths()
	}
	if flags&16 != 0 {
		opts.QueryLengths = lengths()
	}
	return opts
}

// Plan.Explain names the problem, the kernel the plan chose and why, and
// the call's masks (Options.MaskSummary) and memory.
func TestPlanExplain(t *testing.T) {
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight, KeyLengths: []int{5}, WantWeights: true}
	plan, err := devtest.Dev.Plan([]int{1, 2, 4, 8}, []int{1, 1, 6, 8}, []int{1, 1, 6, 8}, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := plan.Explain(opts)
	for _, want := range []string{"plan:\n", "kernel      " + plan.Kernel.Variant + "\n", plan.Kernel.Why,
		"2 query heads share 1 K/V heads", "masks       causal bottom-right, key lengths [5]\n", "a (B,H,L,S) buffer of 192 B"} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain lacks %q:\n%s", want, got)
		}
	}
	if s := (&vkattn.Options{}).MaskSummary(); s != "none" {
		t.Errorf("MaskSummary of no masks: %q, want none", s)
	}
}
