package vkattn_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkattn/vkattn"
)

// A saved tuning is what the planner uses after the next Open, a bad one
// is refused by SetTuning and ignored by Open, and DefaultTuning ignores it.
func TestTuningRoundTrip(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	d, err := vkattn.Open(vkattn.Config{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	def := d.Tuning()
	if def.Source == "" || def.Check(d.Info()) != nil {
		t.Fatalf("default tuning %+v", def)
	}
	tuned := d.Tuning()
	tuned.Source = "test"
	tuned.Texel.Rows[64], tuned.Storage.Rows[64] = 2, 2
	tuned.Texel.WorkGroup, tuned.Storage.WorkGroup = 16, 16
	path, err := d.SaveTuning(tuned)
	if err != nil {
		t.Fatal(err)
	}
	// The device that saved it plans with it at once; so does a new one.
	for _, cfg := range []vkattn.Config{{}, {Validation: true}} {
		dd := d
		if cfg.Validation {
			if dd, err = vkattn.Open(cfg); err != nil {
				t.Fatal(err)
			}
			defer dd.Close()
		}
		p, err := dd.Plan([]int{1, 2, 64, 64}, []int{1, 2, 64, 64}, []int{1, 2, 64, 64}, vkattn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Kernel.Rows != 2 || p.Kernel.WorkGroup != 16 || p.Kernel.Why != "test" {
			t.Fatalf("plan with saved tuning: %v", p)
		}
	}
	dflt, err := vkattn.Open(vkattn.Config{Validation: true, DefaultTuning: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dflt.Close()
	if got := dflt.Tuning(); got.Source != def.Source || got.Texel.Rows[64] != def.Texel.Rows[64] {
		t.Fatalf("DefaultTuning: %+v, want %+v", got, def)
	}

	bad := d.Tuning()
	bad.Texel.Rows[128] = 3
	if _, err := d.SaveTuning(bad); !errors.Is(err, vkattn.ErrTuning) {
		t.Fatalf("3 rows per invocation: %v, want ErrTuning", err)
	}
	bad = d.Tuning()
	bad.Storage.WorkGroup = 48
	if err := d.SetTuning(bad); !errors.Is(err, vkattn.ErrTuning) {
		t.Fatalf("workgroup 48: %v, want ErrTuning", err)
	}
	// A corrupt file is ignored: Open falls back to the defaults.
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) == "" {
		t.Fatal("no tuning directory")
	}
	again, err := vkattn.Open(vkattn.Config{Validation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.Tuning(); got.Source != def.Source {
		t.Fatalf("after a corrupt tuning file: %+v, want the defaults", got)
	}
}
