package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// vkattn saturation shows the 1/sqrt(d_k) argument: unscaled, the
// weights sharpen (largest weight up, entropy down) as d_k grows and the
// scores' gradient shrinks from its peak; scaled, all stay flat. The plot
// is written.
func TestSaturation(t *testing.T) {
	withDevice(t)
	png := filepath.Join(t.TempDir(), "sat.png")
	var rows []saturationRow
	if err := json.Unmarshal([]byte(cliOK(t, "saturation", "--d", "4,64,256", "--plot", png, "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	at := func(dk int, scaled bool) saturationRow {
		for _, r := range rows {
			if r.DK == dk && r.Scaled == scaled {
				return r
			}
		}
		t.Fatalf("no row for d_k %d scaled %v", dk, scaled)
		return saturationRow{}
	}
	u4, u256, s4, s256 := at(4, false), at(256, false), at(4, true), at(256, true)
	if !(u256.MaxWeight > 0.8 && u256.MaxWeight > u4.MaxWeight && u256.Entropy < 0.5 && u256.Entropy < u4.Entropy) {
		t.Errorf("unscaled: %+v then %+v: want the weights to go one-hot", u4, u256)
	}
	if u256.ScoreGrad >= at(64, false).ScoreGrad {
		t.Errorf("unscaled score gradients %v at 64, %v at 256: want them falling", at(64, false).ScoreGrad, u256.ScoreGrad)
	}
	for _, r := range []saturationRow{s4, at(64, true), s256} {
		if r.MaxWeight > 0.1 || r.Entropy < 4.2 || r.ScoreGrad < 0.8 || r.ScoreGrad > 1.3 {
			t.Errorf("scaled: %+v: want flat weights and gradients near 1", r)
		}
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
	checkRefused(t, []string{"saturation", "--d", "1024"}, 2, "at most", "")
}
