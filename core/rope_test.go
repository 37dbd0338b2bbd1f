package core

import (
	"errors"
	"strings"
	"testing"
)

// RoPE.Check checks the table at the positions a problem uses (SEMANTICS.md
// §5): with linear:1e-308 the largest frequency is 1e308, so position 1
// is the last whose angle is finite. Queries lie within [-L, S-1] and keys
// within [0, S-1]; a KV cache of capacity C passes Dims{S: C}; unknown
// extents allow positions up to 2^31-1; explicit positions count as given.
func TestRoPECheckAtPositions(t *testing.T) {
	r := RoPE{Theta: 1e4, Scaling: RoPEScaling{Kind: RoPELinear, Factor: 1e-308}}
	explicit := r
	explicit.QueryPositions, explicit.KeyPositions = []int{0, -1}, []int{1, 0}
	far := explicit
	far.KeyPositions = []int{1, 2}
	for _, c := range []struct {
		name string
		r    RoPE
		d    Dims
		ok   bool
		says string
	}{
		{"L 1, S 2", r, Dims{B: 1, L: 1, S: 2}, true, ""},
		{"L 1, S 3: key 2", r, Dims{B: 1, L: 1, S: 3}, false, "position 2 turns"},
		{"L 2, S 1: queries from -2 (key lengths 0)", r, Dims{B: 1, L: 2, S: 1}, false, "position 2 turns"},
		{"a cache of capacity 2", r, Dims{S: 2}, true, ""},
		{"a cache of capacity 3", r, Dims{S: 3}, false, "position 2 turns"},
		{"unknown extents", r, Dims{}, false, "not known"},
		{"explicit positions within 1", explicit, Dims{B: 1, L: 2, S: 2}, true, ""},
		{"explicit positions within 1, extents unknown", explicit, Dims{}, true, ""},
		{"an explicit key position 2", far, Dims{B: 1, L: 2, S: 2}, false, "position 2 turns"},
	} {
		err := c.r.Check(64, c.d)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && (!errors.Is(err, ErrOption) || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%s: %v, want ErrOption saying %q", c.name, err, c.says)
		}
	}
}
