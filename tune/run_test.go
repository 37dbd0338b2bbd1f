package tune

import (
	"context"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/vk"
)

// openDevice opens the default device with the quirk-table tuning and the
// validation layer on, and checks at the end that the layer said nothing.
func openDevice(t *testing.T) *vkattn.Device {
	t.Helper()
	// make test installs the layer; a missing one is a failure, not a skip.
	if ok, err := vk.LayerAvailable("VK_LAYER_KHRONOS_validation"); err != nil || !ok {
		t.Fatalf("Vulkan validation layer unavailable (ok=%v): %v", ok, err)
	}
	t.Setenv("VKATTN_VALIDATION", "1")
	before := len(vkattn.ValidationMessages())
	dev, err := vkattn.Open(vkattn.Config{DefaultTuning: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Close()
		if msgs := vkattn.ValidationMessages()[before:]; len(msgs) > 0 {
			t.Errorf("validation layer reported %d messages, first: %s", len(msgs), msgs[0])
		}
	})
	return dev
}

// smallConfig measures d_max 16 at the default workgroup and split-K keys
// only: a handful of variants, the ones the CLI's tune tests compile too.
func smallConfig(def vkattn.Tuning, progress Progress) Config {
	pt := def.For(def.Path)
	return Config{Widths: []int{16}, Reps: 1, Length: 16, Seed: 1,
		WorkGroups: []int{pt.WorkGroup}, SplitKeys: []int{pt.SplitKeys}, Progress: progress}
}

func TestRunMeasuresEveryCandidateAndChoosesOne(t *testing.T) {
	dev := openDevice(t)
	def := dev.Tuning()
	type step struct {
		done, total int
		what        string
	}
	var steps []step
	rep, err := Run(context.Background(), dev, smallConfig(def, func(done, total int, what string) {
		steps = append(steps, step{done, total, what})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Interrupted {
		t.Fatal("interrupted without a cancel")
	}

	// Rows 1, 2, 4 and 8 at the default workgroup (the default among them),
	// then the default split-K keys.
	if len(rep.Candidates) != 4 {
		t.Errorf("%d prefill candidates, want 4: %+v", len(rep.Candidates), rep.Candidates)
	}
	winners := 0
	for _, c := range rep.Candidates {
		if c.Error == "" && (!c.OK() || c.ColdNS <= 0 || c.MedianNS <= 0 || c.Variant == "") {
			t.Errorf("candidate without times: %+v", c)
		}
		if c.Winner {
			winners++
			if pt := rep.Chosen.For(rep.Path); pt.Rows[16] != c.Rows || pt.WorkGroup != c.WorkGroup {
				t.Errorf("winner rows %d wg %d, chosen rows %d wg %d", c.Rows, c.WorkGroup, pt.Rows[16], pt.WorkGroup)
			}
		}
	}
	if winners != 1 {
		t.Errorf("%d prefill winners, want 1", winners)
	}
	if rep.SplitNote == "" && (len(rep.SplitK) != 1 || !rep.SplitK[0].Winner || !rep.SplitK[0].Default) {
		t.Errorf("split-K: %+v, want the default alone, chosen", rep.SplitK)
	}
	if rep.SplitNote != "" && rep.SplitK != nil {
		t.Errorf("split-K not measured (%s) but has results %+v", rep.SplitNote, rep.SplitK)
	}
	if err := rep.Chosen.Check(dev.Info()); err != nil {
		t.Errorf("chosen tuning: %v", err)
	}
	if !strings.HasPrefix(rep.Chosen.Source, "vkattn tune ") {
		t.Errorf("source %q", rep.Chosen.Source)
	}
	if got := dev.Tuning(); got.Source != def.Source {
		t.Errorf("after Run the device plans with %q, want its own %q back", got.Source, def.Source)
	}

	// Progress: one total, never backwards, ending at it; each candidate
	// named before it is measured.
	want := (4 + 1) * (1 + 1)
	if len(steps) == 0 || steps[len(steps)-1].done != want {
		t.Fatalf("progress %+v, want it to end at %d", steps, want)
	}
	for i, s := range steps {
		if s.total != want || (i > 0 && s.done < steps[i-1].done) {
			t.Errorf("step %d: %+v (total %d)", i, s, want)
		}
	}
	if !strings.HasPrefix(steps[0].what, "d_max 16 rows ") {
		t.Errorf("first step %q", steps[0].what)
	}
}

func TestRunCancelledChoosesNothing(t *testing.T) {
	dev := openDevice(t)
	def := dev.Tuning()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Run(ctx, dev, smallConfig(def, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.Chosen.Source != def.Source || rep.SplitK != nil {
		t.Errorf("cancelled run: interrupted %v, chosen %q, split-K %+v; want interrupted, the default, nothing", rep.Interrupted, rep.Chosen.Source, rep.SplitK)
	}
	if len(rep.Candidates) != 4 || rep.Candidates[0].Error == "" {
		t.Errorf("candidates %+v: want all four kept, the first failed on the cancel", rep.Candidates)
	}
}

func TestRunRefusesABadConfigBeforeMeasuring(t *testing.T) {
	// check runs before the device is touched, so a nil device is fine.
	if _, err := Run(context.Background(), nil, Config{Widths: []int{300}, Reps: 1, Length: 8}); err == nil || !strings.Contains(err.Error(), "head width 300") {
		t.Errorf("width 300: %v", err)
	}
}

// TestRunOnATiledPlan: on a device whose plans use the tiled GPU kernels
// (planned as NVIDIA's driver), tuning measures the row kernels' candidates
// and split-K without errors, and the chosen tuning keeps the tiled
// kernels' tiles as the defaults have them.
func TestRunOnATiledPlan(t *testing.T) {
	t.Setenv("VKATTN_VALIDATION", "1")
	before := len(vkattn.ValidationMessages())
	dev, err := vkattn.Open(vkattn.Config{PlanAs: "nvidia"})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	def := dev.Tuning()
	if def.Tiled == nil {
		t.Fatalf("the NVIDIA plan's tuning has no tiles: %+v", def)
	}
	rep, err := Run(context.Background(), dev, smallConfig(def, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(rep.Candidates, rep.SplitK...) {
		if c.Error != "" {
			t.Errorf("candidate rows %d wg %d split keys %d: %s", c.Rows, c.WorkGroup, c.SplitKeys, c.Error)
		}
	}
	if len(rep.SplitK) == 0 || rep.SplitNote != "" {
		t.Errorf("split-K not measured: %q", rep.SplitNote)
	}
	if rep.Chosen.Tiled == nil || *rep.Chosen.Tiled != *def.Tiled {
		t.Errorf("chosen tiles %+v, want the defaults' %+v", rep.Chosen.Tiled, def.Tiled)
	}
	if msgs := vkattn.ValidationMessages()[before:]; len(msgs) > 0 {
		t.Errorf("validation layer reported %d messages, first: %s", len(msgs), msgs[0])
	}
}
