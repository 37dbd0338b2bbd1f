package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkattn/vkattn/internal/train"
)

// vkattn saturation shows the 1/sqrt(d_k) argument: unscaled, the
// weights sharpen (largest weight up, entropy down) as d_k grows and the
// scores' gradient shrinks past its peak; scaled, all stay flat. The plot
// is written.
func TestSaturation(t *testing.T) {
	withDevice(t)
	png := filepath.Join(t.TempDir(), "sat.png")
	var rows []train.SaturationRow
	// d_k up to 64: each width is another kernel for lavapipe to compile,
	// and the trend shows by then.
	if err := json.Unmarshal([]byte(cliOK(t, "saturation", "--d", "4,16,64", "--plot", png, "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	at := func(dk int, scaled bool) train.SaturationRow {
		for _, r := range rows {
			if r.DK == dk && r.Scaled == scaled {
				return r
			}
		}
		t.Fatalf("no row for d_k %d scaled %v", dk, scaled)
		return train.SaturationRow{}
	}
	u4, u64, s4, s64 := at(4, false), at(64, false), at(4, true), at(64, true)
	if !(u64.MaxWeight > 0.7 && u64.MaxWeight > u4.MaxWeight && u64.Entropy < 1 && u64.Entropy < u4.Entropy) {
		t.Errorf("unscaled: %+v then %+v: want the weights to go one-hot", u4, u64)
	}
	if !(u64.ScoreGrad < at(16, false).ScoreGrad) {
		t.Errorf("unscaled score gradients %v at 16, %v at 64: want them falling", at(16, false).ScoreGrad, u64.ScoreGrad)
	}
	for _, r := range []train.SaturationRow{s4, at(16, true), s64} {
		if !(r.MaxWeight <= 0.1 && r.Entropy >= 4.2 && r.ScoreGrad >= 0.8 && r.ScoreGrad <= 1.3) {
			t.Errorf("scaled: %+v: want flat weights and gradients near 1", r)
		}
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
	checkRefused(t, []string{"saturation", "--d", "1024"}, 2, "at most", "")
}
