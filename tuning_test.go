package vkattn_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/pipelines"
)

// A saved tuning is what the planner uses after the next Open, a bad one
// is refused by SetTuning and ignored by Open, and DefaultTuning and
// PlanAs ignore it. The plan it gives is checked as the device plans:
// row kernels take its rows and workgroup, tiled ones (a GPU's own plan)
// its name.
func TestTuningRoundTrip(t *testing.T) {
	devtest.TempUserCache(t)
	t.Setenv("VKATTN_PLAN_AS", "") // saved tunings are for a device's own plans
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
		tiled := devtest.VariantOf(p.Kernel).Family == pipelines.FamilyTiled
		if p.Kernel.Why != "test" || !tiled && (p.Kernel.Rows != 2 || p.Kernel.WorkGroup != 16) {
			t.Fatalf("plan with saved tuning: %v", p)
		}
	}
	vendor, err := vkattn.Open(vkattn.Config{Validation: true, PlanAs: "amd"})
	if err != nil {
		t.Fatal(err)
	}
	defer vendor.Close()
	if got := vendor.Tuning(); got.Source == "test" || vendor.PlannedAs() != "amd" {
		t.Fatalf("PlanAs amd took the saved tuning: %+v", got)
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
