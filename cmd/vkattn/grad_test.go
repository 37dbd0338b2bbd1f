package main

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/reference"
)

// grad writes dQ, dK, dV (and dSinks) equal to the float64 reference's
// gradients: GQA with a bottom-right causal mask under lavapipe's plan
// and NVIDIA's, and masks, lengths and every score variant with sinks;
// --check passes, the files keep the inputs' shapes.
func TestGradCommand(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewPCG(23, 23))
	dir := t.TempDir()
	qs, ks, vs := [4]int{1, 4, 6, 8}, [4]int{1, 2, 9, 8}, [4]int{1, 2, 9, 16}
	qPath, q := randomNPY(t, r, dir, "q.npy", qs)
	kPath, k := randomNPY(t, r, dir, "k.npy", ks)
	vPath, v := randomNPY(t, r, dir, "v.npy", vs)
	doPath, dO := randomNPY(t, r, dir, "do.npy", [4]int{1, 4, 6, 16})
	sinks := save(t, dir, "sinks.npy", []float32{0.5, -1, 1.5, 0})
	for _, c := range []struct {
		name string
		args []string
		opts vkattn.Options
	}{
		{"causal", []string{"--causal", "bottom-right"}, vkattn.Options{Causal: vkattn.CausalBottomRight}},
		{"causal, NVIDIA's plan", []string{"--causal", "bottom-right", "--plan-as", "nvidia"}, vkattn.Options{Causal: vkattn.CausalBottomRight}},
		{"variants and sinks", []string{"--causal", "top-left", "--key-lengths", "7", "--query-lengths", "5", "--window", "2,1", "--softcap", "3", "--alibi", "--sinks", sinks, "--scale", "4"},
			vkattn.Options{Causal: vkattn.CausalTopLeft, KeyLengths: []int{7}, QueryLengths: []int{5}, Window: &vkattn.Window{Left: 2, Right: 1},
				Softcap: 3, ALiBi: vkattn.ALiBiSlopes(4), Sinks: []float32{0.5, -1, 1.5, 0}, Scale: vkattn.CustomScale(4)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			paths := map[string]string{}
			args := []string{"grad", "-q", qPath, "-k", kPath, "-v", vPath, "--dout", doPath, "--check", "--json"}
			for _, g := range []string{"dq", "dk", "dv", "dsinks"} {
				if g == "dsinks" && c.opts.Sinks == nil {
					continue
				}
				paths[g] = filepath.Join(out, g+".npy")
				args = append(args, "--"+g, paths[g])
			}
			var s gradSummary
			if err := json.Unmarshal([]byte(cliOK(t, append(args, c.args...)...)), &s); err != nil {
				t.Fatal(err)
			}
			if s.Check == nil || !s.Check.Pass || s.Dims.H != 4 || s.Dims.HKV != 2 {
				t.Errorf("summary %+v", s)
			}
			want, err := reference.AttentionBackward(q, qs, k, ks, v, vs, dO, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []struct {
				name  string
				want  []float64
				shape [4]int
			}{{"dq", want.DQ, qs}, {"dk", want.DK, ks}, {"dv", want.DV, vs}} {
				a := load(t, paths[g.name])
				if !slices.Equal(a.Shape, g.shape[:]) {
					t.Errorf("%s has shape %v, want %v", g.name, a.Shape, g.shape)
				}
				within(t, g.name, a.F32, g.want)
			}
			if c.opts.Sinks != nil {
				within(t, "dsinks", load(t, paths["dsinks"]).F32, want.DSinks)
			}
		})
	}
	checkRefused(t, []string{"grad", "-q", qPath, "-k", kPath, "-v", vPath}, 2, "--dout are required", "")
	checkRefused(t, []string{"grad", "-q", qPath, "-k", kPath, "-v", vPath, "--dout", doPath, "--dsinks", filepath.Join(dir, "x.npy")}, 2, "--dsinks needs --sinks", "")
	checkRefused(t, []string{"grad", "-q", qPath, "-k", kPath, "-v", vPath, "--dout", qPath}, 1, "want O's", "")
}

// Grad refuses --kv-dtype q8_0 as a usage error before
// any input is read (here there is none), where it ran the forward first;
// its help offers only the float types. A bool --dout names every float
// type grad reads, float16 included.
func TestGradRefusals(t *testing.T) {
	dir := t.TempDir()
	none := filepath.Join(dir, "none.npy")
	checkRefused(t, []string{"grad", "-q", none, "-k", none, "-v", none, "--dout", none, "--kv-dtype", "q8_0"}, exitUsage,
		"--kv-dtype q8_0: the backward reads float K and V; say f32, f16 or bf16", "")
	help := cliOK(t, "grad", "-h")
	if !strings.Contains(help, "f32, f16 or bf16 (not q8_0") || strings.Contains(help, "bf16, or q8_0") {
		t.Errorf("grad -h offers q8_0 for --kv-dtype:\n%s", help)
	}
	q, k, v := seed000(t, dir)
	bools := save(t, dir, "bools.npy", [][]bool{{true, false}})
	checkRefused(t, []string{"grad", "-q", q, "-k", k, "-v", v, "--dout", bools}, exitFail, "holds bool values; want float32, float16 or float64", "")
}
