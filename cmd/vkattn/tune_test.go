package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/tune"
)

// tuneArgs is the quick tune the tests run: the smallest bucket, one timed
// call, a small prefill problem.
var tuneArgs = []string{"tune", "--d", "16", "--reps", "1", "--len", "64"}

// tuneRowRE matches a prefill candidate's row in the table.
var tuneRowRE = regexp.MustCompile(`(?m)^d=16 \(d_max 16\) L=S=64\s+rows (\d+), wg (\d+)\s+(.*)$`)

func TestTuneSaves(t *testing.T) {
	withDevice(t)
	devtest.TempUserCache(t)
	t.Setenv("VKATTN_PLAN_AS", "") // a saved tuning is for the device's own plans
	out, errOut, code := cli(t, tuneArgs...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("vkattn %s:\n%s", strings.Join(tuneArgs, " "), out)

	dev, err := vkattn.Open(vkattn.Config{DefaultTuning: true})
	if err != nil {
		t.Fatal(err)
	}
	info := dev.Info()
	def := dev.Tuning()
	dev.Close()
	pd := def.For(def.Path)

	// Every candidate has a row: rows from RowChoices (rows*16 <= 512, so
	// all of them) times the device's workgroups of 8..64, and the default
	// among them.
	type cand struct{ rows, wg int }
	seen := map[cand]string{}
	winners := 0
	var winner cand
	for _, m := range tuneRowRE.FindAllStringSubmatch(out, -1) {
		rows, _ := strconv.Atoi(m[1])
		wg, _ := strconv.Atoi(m[2])
		c := cand{rows, wg}
		seen[c] = m[3]
		if strings.Contains(m[3], "<- chosen") {
			winners++
			winner = c
		}
		if c == (cand{pd.Rows[16], pd.WorkGroup}) && !strings.Contains(m[3], "default") {
			t.Errorf("default rows %d wg %d not marked default: %q", c.rows, c.wg, m[0])
		}
	}
	for _, wg := range tune.WorkGroupsOn(info) {
		for _, rows := range core.RowChoices {
			if _, ok := seen[cand{rows, wg}]; !ok {
				t.Errorf("no row for rows %d, wg %d", rows, wg)
			}
		}
	}
	if _, ok := seen[cand{pd.Rows[16], pd.WorkGroup}]; !ok {
		t.Errorf("the default (rows %d, wg %d) is not a candidate", pd.Rows[16], pd.WorkGroup)
	}
	if winners != 1 {
		t.Fatalf("%d winners marked, want 1:\n%s", winners, out)
	}
	if !strings.Contains(out, "decode split-K") && !strings.Contains(out, "split-K not measured") {
		t.Errorf("no split-K rows or note:\n%s", out)
	}

	path, err := vkattn.TuningFile(info)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "saved to "+path+", used by later runs") {
		t.Errorf("output does not name the saved file %s:\n%s", path, out)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("tuning file: %v", err)
	}
	saved, err := vkattn.LoadTuning(info)
	if err != nil {
		t.Fatal(err)
	}
	if err := saved.Check(info); err != nil {
		t.Errorf("saved tuning does not pass Check: %v", err)
	}
	ps := saved.For(saved.Path)
	if saved.Path != def.Path {
		t.Errorf("saved path %v, default %v", saved.Path, def.Path)
	}
	if ps.Rows[16] != winner.rows || ps.WorkGroup != winner.wg {
		t.Errorf("saved d_max 16: rows %d, wg %d; the table's winner: rows %d, wg %d", ps.Rows[16], ps.WorkGroup, winner.rows, winner.wg)
	}
	// Buckets not measured keep their defaults.
	for _, b := range core.DMaxBuckets[1:] {
		if ps.Rows[b] != pd.Rows[b] {
			t.Errorf("d_max %d was not tuned but has rows %d, default %d", b, ps.Rows[b], pd.Rows[b])
		}
	}
	if !strings.HasPrefix(saved.Source, "vkattn tune ") {
		t.Errorf("source %q", saved.Source)
	}

	// A later Open without DefaultTuning plans with the saved tuning.
	dev, err = vkattn.Open(vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if got := dev.Tuning(); !strings.HasPrefix(got.Source, "vkattn tune") || got.Source != saved.Source {
		t.Errorf("Open uses tuning %q, want the saved %q", got.Source, saved.Source)
	}
	plan, err := dev.Plan([]int{1, 2, 64, 16}, []int{1, 2, 64, 16}, []int{1, 2, 64, 16}, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if k := plan.Kernel; k.Rows != ps.Rows[16] || k.WorkGroup != ps.WorkGroup {
		t.Errorf("plan rows %d, workgroup %d; saved rows %d, workgroup %d", k.Rows, k.WorkGroup, ps.Rows[16], ps.WorkGroup)
	}
	if !strings.Contains(plan.String(), "vkattn tune") {
		t.Errorf("plan does not say it uses the tuning: %s", plan)
	}
}

func TestTuneDryRunJSON(t *testing.T) {
	withDevice(t)
	devtest.TempUserCache(t)
	out, errOut, code := cli(t, append(tuneArgs, "--dry-run", "--json")...)
	if code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	rep := parseJSON[tuneReport](t, out)
	if rep.Saved != "" {
		t.Errorf("dry run reports saved file %q", rep.Saved)
	}
	dev, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	wgs := tune.WorkGroupsOn(dev.Info())
	if len(rep.Candidates) != len(core.RowChoices)*len(wgs) {
		t.Errorf("%d candidates, want %d", len(rep.Candidates), len(core.RowChoices)*len(wgs))
	}
	winners, defaults := 0, 0
	for _, c := range rep.Candidates {
		if c.DMax != 16 || c.D != 16 || c.Dims.L != 64 || c.Reps != 1 {
			t.Errorf("candidate %+v", c)
		}
		if c.Error == "" && (!(c.GFLOPS > 0) || c.MedianNS <= 0 || c.ColdNS <= 0) {
			t.Errorf("candidate without times: %+v", c)
		}
		if c.Winner {
			winners++
			pt := rep.Tuning.For(rep.Tuning.Path)
			if pt.Rows[16] != c.Rows || pt.WorkGroup != c.WorkGroup {
				t.Errorf("winner rows %d wg %d, tuning rows %d wg %d", c.Rows, c.WorkGroup, pt.Rows[16], pt.WorkGroup)
			}
		}
		if c.Default {
			defaults++
		}
	}
	if winners != 1 || defaults != 1 {
		t.Errorf("%d winners, %d defaults: want 1 each", winners, defaults)
	}
	if !strings.HasPrefix(rep.Tuning.Source, "vkattn tune ") {
		t.Errorf("source %q", rep.Tuning.Source)
	}
	if rep.SplitNote == "" {
		splitWinners := 0
		for _, c := range rep.SplitK {
			if c.Dims.DK != 16 || c.Dims.DV != 16 {
				t.Errorf("split-K measured at d_k=%d d_v=%d, want the widest --d, 16", c.Dims.DK, c.Dims.DV)
			}
			if c.Winner {
				splitWinners++
				if pt := rep.Tuning.For(rep.Tuning.Path); pt.SplitKeys != c.SplitKeys {
					t.Errorf("split-K winner %d, tuning %d", c.SplitKeys, pt.SplitKeys)
				}
			}
		}
		if len(rep.SplitK) < len(tune.SplitKeys) || splitWinners != 1 {
			t.Errorf("%d split-K results, %d winners", len(rep.SplitK), splitWinners)
		}
	}

	// Nothing saved.
	path, err := vkattn.TuningFile(dev.Info())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("dry run left %s (stat: %v)", path, err)
	}
	if strings.HasPrefix(dev.Tuning().Source, "vkattn tune") {
		t.Errorf("Open after a dry run uses %q", dev.Tuning().Source)
	}
}

func TestTuneBadFlags(t *testing.T) {
	devtest.TempUserCache(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--d", "0"}, "head width 0"},
		{[]string{"--d", "300"}, "head width 300"},
		{[]string{"--d", "x"}, `"x" is not an integer`},
		{[]string{"--d", "64,60"}, "both in d_max bucket 64"},
		{[]string{"--reps", "0"}, "--reps 0"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		out, errOut, code := cli(t, append([]string{"tune"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("tune %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

func TestTuneHelp(t *testing.T) {
	out, _, code := cli(t, "tune", "-h")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	mentions(t, "help", out, "Usage: vkattn tune", "rows*d_max <= 512", "+-20%", "5%", "--dry-run", "DefaultTuning", "Example", "-reps", "-d widths")
	top, _, _ := cli(t, "help")
	if !strings.Contains(top, "  tune ") {
		t.Errorf("top-level usage does not list tune:\n%s", top)
	}
}
