package vkattn_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/pipelines"
)

// TestExactTiesStayExact: keys whose dot products with the query are equal
// and exact in float32 get exactly equal weights (SEMANTICS.md §8), on every load
// path and the split-K decode kernel. The numbers are derived by hand:
// q = (37, 53, 0...), k_a = (300, 0, ...) and k_b = (53300, -37000, 0, ...)
// both give q.k = 11100, exactly (every partial sum is an integer below
// 2^24); every other key has q.k <= 0, over 3900 below after scaling, so its
// weight is exp(-3900) = 0 in float32 and float64 alike. The weights are
// therefore exactly 1/2 at the two tied keys and 0 elsewhere, and the
// output is exactly the mean of their value rows. A kernel that multiplied
// q by scale*log2(e) before the dot product rounded the two products
// differently: weights 0.5041/0.4959 at d = 8.
func TestExactTiesStayExact(t *testing.T) {
	for _, c := range []struct {
		name     string
		d        *vkattn.Device
		width, s int
		tied     [2]int // the tied keys
		split    bool   // the planner must choose split-K decode
	}{
		{"texel/vec4", devtest.RowDev, 8, 6, [2]int{1, 5}, false},
		{"texel/scalar", devtest.RowDev, 7, 6, [2]int{1, 5}, false},
		{"storage/vec4", devtest.RowStorageDev, 8, 6, [2]int{1, 5}, false},
		{"storage/scalar", devtest.RowStorageDev, 7, 6, [2]int{1, 5}, false},
		// 300 keys: two splits of 256 on lavapipe's texel path, five of 64
		// on the storage path; the tied keys land in different splits, so
		// the combine pass merges them.
		{"texel/split-K", devtest.RowDev, 8, 300, [2]int{5, 290}, true},
		{"storage/split-K", devtest.RowStorageDev, 8, 300, [2]int{5, 290}, true},
		// The tiled GPU kernels: lanes split d and sum by shuffles; ten
		// splits of 32 keys as NVIDIA plans them.
		{"tiled/vec4", devtest.NVIDIADev, 8, 6, [2]int{1, 5}, false},
		{"tiled/scalar", devtest.NVIDIADev, 7, 6, [2]int{1, 5}, false},
		{"tiled/split-K", devtest.NVIDIADev, 8, 300, [2]int{5, 290}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, s := c.width, c.s
			p := &devtest.Problem{QS: [4]int{1, 1, 1, w}, KS: [4]int{1, 1, s, w}, VS: [4]int{1, 1, s, w}}
			p.Q = make([]float32, w)
			p.Q[0], p.Q[1] = 37, 53
			p.K = make([]float32, s*w)
			p.V = make([]float32, s*w)
			for j := 0; j < s; j++ {
				k, v := p.K[j*w:(j+1)*w], p.V[j*w:(j+1)*w]
				switch j {
				case c.tied[0]:
					k[0] = 300
				case c.tied[1]:
					k[0], k[1] = 53300, -37000
				default:
					k[0], k[1] = -float32(j%3), -float32(j%5) // q.k <= 0
				}
				for i := range v {
					v[i] = float32(1000 + 7*j + i) // any weight leaking here shows
				}
			}
			want := make([]float32, w) // the mean of the tied value rows
			for i := range want {
				v0, v1 := float32(3*i-5), float32(11-2*i)
				p.V[c.tied[0]*w+i], p.V[c.tied[1]*w+i] = v0, v1
				want[i] = (v0 + v1) / 2
			}
			p.Weights = !c.split // weights rule out split-K
			got := devtest.RunGPU(t, c.d, p)
			plan := got.Out.Plan.Kernel
			path := strings.Split(c.name, "/")[0]
			tiled := devtest.VariantOf(plan).Family == pipelines.FamilyTiled
			if path == "tiled" {
				path = "storage"
			}
			if plan.LoadPath.String() != path || tiled != (c.d == devtest.NVIDIADev) || plan.Vec4 != (w%4 == 0) || (plan.Splits > 0) != c.split {
				t.Fatalf("planned %v, not the %s path this case is for", plan, c.name)
			}
			if !slices.Equal(got.O, want) {
				t.Errorf("output %v, want exactly %v", got.O, want)
			}
			for j, x := range got.W {
				want := float32(0)
				if j == c.tied[0] || j == c.tied[1] {
					want = 0.5
				}
				if x != want {
					t.Errorf("weight %d = %v, want exactly %v", j, x, want)
				}
			}
			// The float64 reference agrees with the derivation.
			ref := devtest.RunReference(t, p)
			for i, x := range ref.O {
				if x != float64(want[i]) {
					t.Fatalf("reference output %v, want %v", ref.O, want)
				}
			}
		})
	}
}
