// Package golden loads the golden attention cases kept as JSON in testdata/.
//
// A golden case is a small attention problem together with outputs whose
// numbers come from outside this code base (SEMANTICS.md §18 and hand derivations
// written next to them), so the GPU kernels and the float64 reference are
// both checked against something neither of them computed.
//
// One file holds one case (a JSON object) or several (a JSON array):
//
//	{
//	  "name": "seed000_plain",
//	  "source": "SEMANTICS.md §18, seed 000",
//	  "q": {"shape": [1, 2], "values": [1, 0]},
//	  "k": {"shape": [3, 2], "values": [1, 0, 0, 1, 1, 1]},
//	  "v": {"shape": [3, 2], "values": [2, 0, 0, 4, 2, 2]},
//	  "mask": {"shape": [1, 3], "values": [0, 0, "-inf"]},
//	  "expect": {"O": {"shape": [1, 2], "values": [1.3395, 1.3210]}, "tolerance": 1e-4}
//	}
//
// Q, K and V have rank 2 (L,d), 3 (H,L,d) or 4 (B,H,L,d), as vkattn's Upload
// takes them. Masks have rank 1 to 4 and are filled from the left to
// (B,H,L,S) the way NumPy broadcasts. Infinities are written as the strings
// "-inf" and "inf" because JSON has no literal for them. Expected arrays are
// laid out with Q's leading axes: O is (..., L, d_v), A (the attention
// weights) is (..., L, S) and LSE is (..., L).
package golden

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/verdict"
)

// DefaultTolerance is the absolute tolerance of a case that names none.
const DefaultTolerance = 1e-5

// Array is a row-major array with its shape.
type Array struct {
	Shape  []int            `json:"shape"`
	Values []verdict.Number `json:"values"`
}

// Float32 returns the values as float32.
func (a *Array) Float32() []float32 {
	out := make([]float32, len(a.Values))
	for i, x := range a.Values {
		out[i] = float32(x)
	}
	return out
}

// Float64 returns the values as float64.
func (a *Array) Float64() []float64 {
	out := make([]float64, len(a.Values))
	for i, x := range a.Values {
		out[i] = float64(x)
	}
	return out
}

func (a *Array) check(what string) error {
	if a == nil {
		return fmt.Errorf("%s is missing", what)
	}
	n, err := count(a.Shape)
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if n != len(a.Values) {
		return fmt.Errorf("%s: shape %v needs %d values, got %d", what, a.Shape, n, len(a.Values))
	}
	return nil
}

// BoolArray is a boolean mask with its shape and the meaning of true:
// "true-allows" or "true-blocks" (core.MaskMeaning's names).
type BoolArray struct {
	Shape   []int  `json:"shape"`
	Values  []bool `json:"values"`
	Meaning string `json:"meaning"`
}

// Expect holds a case's expected outputs.
type Expect struct {
	O   *Array `json:"O"`   // required
	A   *Array `json:"A"`   // attention weights, optional
	LSE *Array `json:"LSE"` // log-sum-exp, optional
	// Tolerance is the largest absolute difference accepted; 0 means
	// DefaultTolerance. Values copied to 4 digits need about 1e-4.
	Tolerance float64 `json:"tolerance,omitempty"`
}

// Case is one golden attention problem.
type Case struct {
	Name   string `json:"name"`
	Source string `json:"source"` // where the expected numbers come from
	// Description says what the case exercises; Derivation shows how the
	// expected values follow by hand when they are not copied verbatim.
	Description string `json:"description,omitempty"`
	Derivation  string `json:"derivation,omitempty"`

	Q Array `json:"q"`
	K Array `json:"k"`
	V Array `json:"v"`

	Mask         *Array     `json:"mask,omitempty"`
	BoolMask     *BoolArray `json:"bool_mask,omitempty"`
	Causal       string     `json:"causal,omitempty"` // "none" (default), "top-left", "bottom-right"
	KeyLengths   []int      `json:"key_lengths,omitempty"`
	QueryLengths []int      `json:"query_lengths,omitempty"`
	Scale        *float64   `json:"scale,omitempty"` // default 1/sqrt(d_k)

	Expect Expect `json:"expect"`

	// File is the file the case was loaded from.
	File string `json:"-"`
}

// Tolerance is the case's absolute tolerance.
func (c *Case) Tolerance() float64 {
	if c.Expect.Tolerance > 0 {
		return c.Expect.Tolerance
	}
	return DefaultTolerance
}

// Problem is a case as vkattn takes it: host arrays, their shapes and Options.
type Problem struct {
	Q, K, V                []float32
	QShape, KShape, VShape []int  // as written in the case, rank 2-4
	Q4, K4, V4             [4]int // filled to (B, heads, positions, width)
	Dims                   core.Dims
	Opts                   core.Options // WantWeights and WantLSE follow the expectations
}

// Problem turns the case into host arrays and core.Options, validated with
// core.CheckProblem.
func (c *Case) Problem() (*Problem, error) {
	p := &Problem{
		Q: c.Q.Float32(), K: c.K.Float32(), V: c.V.Float32(),
		QShape: c.Q.Shape, KShape: c.K.Shape, VShape: c.V.Shape,
	}
	for _, t := range []struct {
		name string
		a    *Array
		dst  *[4]int
	}{{"q", &c.Q, &p.Q4}, {"k", &c.K, &p.K4}, {"v", &c.V, &p.V4}} {
		if err := t.a.check(t.name); err != nil {
			return nil, err
		}
		s, err := core.Shape4(t.a.Shape)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		*t.dst = s
	}
	opts := core.Options{
		KeyLengths:   c.KeyLengths,
		QueryLengths: c.QueryLengths,
		WantWeights:  c.Expect.A != nil,
		WantLSE:      c.Expect.LSE != nil,
	}
	if c.Scale != nil {
		opts.Scale = core.CustomScale(*c.Scale)
	}
	if c.Causal != "" {
		cz, err := core.ParseCausal(c.Causal)
		if err != nil {
			return nil, err
		}
		opts.Causal = cz
	}
	if m := c.Mask; m != nil {
		if err := m.check("mask"); err != nil {
			return nil, err
		}
		s, err := FillMaskShape(m.Shape)
		if err != nil {
			return nil, fmt.Errorf("mask: %w", err)
		}
		opts.Mask = &core.Mask{Shape: s, Values: m.Float32()}
	}
	if m := c.BoolMask; m != nil {
		s, err := FillMaskShape(m.Shape)
		if err != nil {
			return nil, fmt.Errorf("bool_mask: %w", err)
		}
		var meaning core.MaskMeaning
		switch m.Meaning {
		case core.TrueAllows.String():
			meaning = core.TrueAllows
		case core.TrueBlocks.String():
			meaning = core.TrueBlocks
		default:
			return nil, fmt.Errorf("bool_mask: meaning %q: want %q or %q", m.Meaning, core.TrueAllows, core.TrueBlocks)
		}
		opts.BoolMasks = []core.BoolMask{{Shape: s, Values: m.Values, Meaning: meaning}}
	}
	d, err := core.CheckProblem(p.Q4, p.K4, p.V4, &opts)
	if err != nil {
		return nil, err
	}
	p.Dims, p.Opts = d, opts
	return p, nil
}

// FillMaskShape fills a mask shape of rank 1 to 4 from the left with ones to
// (B, H, L, S), the way NumPy broadcasts: (S) -> (1,1,1,S), (L,S) -> (1,1,L,S).
func FillMaskShape(shape []int) (core.MaskShape, error) {
	var s core.MaskShape
	if len(shape) < 1 || len(shape) > 4 {
		return s, fmt.Errorf("rank %d mask shape %v: want rank 1 to 4, broadcast to (B,H,L,S)", len(shape), shape)
	}
	for i := range s {
		s[i] = 1
	}
	copy(s[4-len(shape):], shape)
	for _, n := range shape {
		if n <= 0 {
			return s, fmt.Errorf("mask shape %v has an empty axis", shape)
		}
	}
	return s, nil
}

// OutputShapes are the shapes of O, A and LSE for a Q of the given shape
// (rank 2-4) with S keys and value width dv: Q's leading axes followed by
// (L, dv), (L, S) and (L).
func OutputShapes(qShape []int, s, dv int) (o, a, lse []int) {
	lead := qShape[:len(qShape)-1] // ..., L
	o = append(append([]int(nil), lead...), dv)
	a = append(append([]int(nil), lead...), s)
	lse = append([]int(nil), lead...)
	return o, a, lse
}

// validate checks everything about a case that can be checked without a
// device, so a broken file fails at Load with its name in the message.
func (c *Case) validate() error {
	if c.Name == "" {
		return errors.New("case has no name")
	}
	if c.Source == "" {
		return errors.New("source is empty: say where the expected numbers come from")
	}
	p, err := c.Problem()
	if err != nil {
		return err
	}
	if c.Expect.Tolerance < 0 || math.IsNaN(c.Expect.Tolerance) {
		return fmt.Errorf("tolerance %v is negative", c.Expect.Tolerance)
	}
	if c.Expect.O == nil {
		return errors.New("expect.O is missing")
	}
	oShape, aShape, lseShape := OutputShapes(c.Q.Shape, p.Dims.S, p.Dims.DV)
	for _, e := range []struct {
		name  string
		a     *Array
		shape []int
	}{{"expect.O", c.Expect.O, oShape}, {"expect.A", c.Expect.A, aShape}, {"expect.LSE", c.Expect.LSE, lseShape}} {
		if e.a == nil {
			continue
		}
		if err := e.a.check(e.name); err != nil {
			return err
		}
		if !slices.Equal(e.a.Shape, e.shape) {
			return fmt.Errorf("%s has shape %v, want %v (Q's leading axes, then its own)", e.name, e.a.Shape, e.shape)
		}
		for i, x := range e.a.Values {
			// LSE is -inf for fully masked rows; everything else is finite.
			if math.IsNaN(float64(x)) || (math.IsInf(float64(x), 0) && !(e.name == "expect.LSE" && math.IsInf(float64(x), -1))) {
				return fmt.Errorf("%s value %d is %v", e.name, i, float64(x))
			}
		}
	}
	return nil
}

// Load reads every *.json file in dir, in name order, and validates each case.
func Load(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("golden: %w", err)
		}
		return nil, fmt.Errorf("golden: no *.json files in %s", dir)
	}
	sort.Strings(files)
	var cases []Case
	seen := map[string]string{}
	for _, f := range files {
		cs, err := LoadFile(f)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if prev, ok := seen[c.Name]; ok {
				return nil, fmt.Errorf("golden: case %q in %s is also in %s", c.Name, f, prev)
			}
			seen[c.Name] = f
		}
		cases = append(cases, cs...)
	}
	return cases, nil
}

// LoadFile reads the case or cases in one JSON file. Unknown fields are
// errors, so a misspelt key cannot silently drop an expectation.
func LoadFile(path string) ([]Case, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("golden: %w", err)
	}
	var cases []Case
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if len(trimmed) > 0 && trimmed[0] == '[' {
		err = dec.Decode(&cases)
	} else {
		var c Case
		err = dec.Decode(&c)
		cases = []Case{c}
	}
	if err != nil {
		return nil, fmt.Errorf("golden: %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("golden: %s: data after the first JSON value", path)
	}
	for i := range cases {
		cases[i].File = path
		if err := cases[i].validate(); err != nil {
			name := cases[i].Name
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			return nil, fmt.Errorf("golden: %s: case %s: %w", path, name, err)
		}
	}
	return cases, nil
}

func count(shape []int) (int, error) {
	if len(shape) == 0 {
		return 0, errors.New("shape is missing")
	}
	n := 1
	for _, s := range shape {
		if s <= 0 {
			return 0, fmt.Errorf("shape %v has an empty axis", shape)
		}
		if n > math.MaxInt32/s {
			return 0, fmt.Errorf("shape %v is too large for a golden case", shape)
		}
		n *= s
	}
	return n, nil
}
