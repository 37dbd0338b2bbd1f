package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/reference"
)

const testdata = "../../testdata"

func TestLoadAll(t *testing.T) {
	cases, err := Load(testdata)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(testdata, "*.json"))
	perFile := map[string]int{}
	for _, c := range cases {
		perFile[c.File]++
		if c.Expect.O == nil || len(c.Expect.O.Values) == 0 {
			t.Errorf("%s: no expected O", c.Name)
		}
		if c.Source == "" {
			t.Errorf("%s: no source", c.Name)
		}
		if _, err := c.Problem(); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	for _, f := range files {
		if perFile[f] == 0 {
			t.Errorf("%s holds no case", f)
		}
	}
	// Every worked example of SEMANTICS.md §18 must be present.
	for _, name := range []string{
		"seed000_plain", "seed000_mask", "seed000_weights_half_quarter_quarter",
		"seed003_self_attention", "seed003_zero_values", "seed003_values_shifted",
		"seed003_zero_third_query", "qk54_v53",
	} {
		found := false
		for _, c := range cases {
			found = found || c.Name == name
		}
		if !found {
			t.Errorf("SEMANTICS.md §18 example %s is missing", name)
		}
	}
}

// TestReferenceAgrees checks the float64 reference against the golden
// numbers: if it disagrees, either a golden value or the reference is wrong,
// and the GPU comparisons in cmd/vkattn would be meaningless.
func TestReferenceAgrees(t *testing.T) {
	cases, err := Load(testdata)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		p, err := c.Problem()
		if err != nil {
			t.Fatal(err)
		}
		r, err := reference.Attention(p.Q, p.Q4, p.K, p.K4, p.V, p.V4, p.Opts)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		tol := c.Tolerance()
		check := func(what string, got []float64, want *Array) {
			if want == nil {
				return
			}
			g := make([]float32, len(got))
			for i, x := range got {
				g[i] = float32(x)
			}
			// float32 rounding of the reference output adds up to ~1e-7.
			if d := verdict.MaxAbsDiff(g, want.Float64()); d > tol {
				t.Errorf("%s: reference %s differs by %.3g (tolerance %.3g)", c.Name, what, d, tol)
			}
		}
		check("O", r.O, c.Expect.O)
		check("A", r.Weights, c.Expect.A)
		check("LSE", r.LSE, c.Expect.LSE)
	}
}

func TestLoadErrors(t *testing.T) {
	good := `{"name": "x", "source": "test", "q": {"shape": [1,2], "values": [1,0]},
	  "k": {"shape": [1,2], "values": [1,0]}, "v": {"shape": [1,2], "values": [2,3]},
	  "expect": {"O": {"shape": [1,2], "values": [2,3]}}}`
	for name, body := range map[string]string{
		"no expectation": strings.Replace(good, `"expect": {"O": {"shape": [1,2], "values": [2,3]}}`, `"expect": {}`, 1),
		"no source":      strings.Replace(good, `"source": "test"`, `"source": ""`, 1),
		"unknown field":  strings.Replace(good, `"name"`, `"nmae": "y", "name"`, 1),
		"bad O shape":    strings.Replace(good, `"O": {"shape": [1,2]`, `"O": {"shape": [2,1]`, 1),
		"value count":    strings.Replace(good, `"values": [1,0]}`, `"values": [1,0,0]}`, 1),
		"bad number":     strings.Replace(good, `"values": [2,3]}}}`, `"values": [2,"three"]}}}`, 1),
		"bad causal":     strings.Replace(good, `"expect"`, `"causal": "diagonal", "expect"`, 1),
		"bad meaning":    strings.Replace(good, `"expect"`, `"bool_mask": {"shape": [1], "values": [true]}, "expect"`, 1),
		"+inf mask":      strings.Replace(good, `"expect"`, `"mask": {"shape": [1], "values": ["inf"]}, "expect"`, 1),
		"trailing data":  good + "{}",
		"not json":       "seed",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil {
			t.Errorf("%s: Load accepted it", name)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, err := Load(dir)
	if err != nil || len(cs) != 1 || cs[0].Tolerance() != DefaultTolerance {
		t.Fatalf("good case: %v, %+v", err, cs)
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("empty directory accepted")
	}
}
