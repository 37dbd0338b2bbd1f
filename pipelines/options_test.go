package pipelines

import (
	"math/bits"
	"slices"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// TestScoreVariantTable: each variant a bit of its own, turned on by its
// option alone, named once; the per-head buffer holds head h's sink at 2h
// and its ALiBi slope at 2h+1 (what attention_params.glsl reads).
func TestScoreVariantTable(t *testing.T) {
	var all ScoreVariants
	names := map[string]bool{}
	for _, s := range scoreVariants {
		if bits.OnesCount32(uint32(s.bit)) != 1 || all&s.bit != 0 {
			t.Errorf("%s: bit %#x is not a bit of its own", s.name, s.bit)
		}
		all |= s.bit
		if names[s.name] || names[s.glsl] {
			t.Errorf("%s (%s) named twice", s.name, s.glsl)
		}
		names[s.name], names[s.glsl] = true, true
	}
	one := map[ScoreVariants]core.Options{
		VariantWindow:  {Window: &core.Window{Left: 3, Right: 0}},
		VariantSoftcap: {Softcap: 30},
		VariantALiBi:   {ALiBi: []float32{0.5, 0.25}},
		VariantSinks:   {Sinks: []float32{-1, 2}},
	}
	if len(one) != len(scoreVariants) {
		t.Fatalf("the test knows %d variants, the table has %d", len(one), len(scoreVariants))
	}
	for bit, opts := range one {
		if got := VariantsOf(&opts); got != bit {
			t.Errorf("VariantsOf(%+v) = %#x, want %#x", opts, got, bit)
		}
	}
	if got := VariantsOf(&core.Options{}); got != 0 {
		t.Errorf("no options: variants %#x", got)
	}
	both := core.Options{Sinks: []float32{-1, 2}, ALiBi: []float32{0.5, 0.25}, Softcap: 30}
	if got, want := HeadValues(&both, 2), []float32{-1, 0.5, 2, 0.25}; !slices.Equal(got, want) {
		t.Errorf("HeadValues with sinks and slopes = %v, want %v", got, want)
	}
	if got, want := HeadValues(&core.Options{ALiBi: []float32{0.5, 0.25}}, 2), []float32{0, 0.5, 0, 0.25}; !slices.Equal(got, want) {
		t.Errorf("HeadValues with slopes alone = %v, want %v", got, want)
	}
	if got := HeadValues(&core.Options{Softcap: 30}, 2); got != nil {
		t.Errorf("HeadValues without per-head values = %v, want nil", got)
	}
	if got := (VariantWindow | VariantSinks).names(); !slices.Equal(got, []string{"sliding window", "attention sinks"}) {
		t.Errorf("names = %q", got)
	}
	if got := (VariantWindow | VariantSinks).flags(); got != flagSinks {
		t.Errorf("the Params flags of a window and sinks = %#x, want FLAG_SINKS %#x", got, flagSinks)
	}
	if r := all.Refused(true, true); r != "" {
		t.Errorf("a cache call or the backward pass refuses %s", r)
	}
}

// TestMaskTable: the MASKED constants and the Params flags of each mix of
// masks.
func TestMaskTable(t *testing.T) {
	for _, c := range []struct {
		mask, boolMask, keyPad bool
		flags                  int
	}{
		{false, false, false, 0},
		{true, false, false, flagMask},
		{false, true, true, flagBoolMask | flagKeyPad},
		{true, true, true, flagMask | flagBoolMask | flagKeyPad},
	} {
		s := DenseShape(1, 2, 2, 4, 8, 16, 16)
		s.Mask.Given, s.BoolMask.Given, s.KeyPadding = c.mask, c.boolMask, c.keyPad
		if s.maskFlags() != c.flags || s.maskSpec() != int32(c.flags) || s.masked() != (c.flags != 0) {
			t.Errorf("%+v: flags %#x, MASKED %#x, masked %v; want %#x", c, s.maskFlags(), s.maskSpec(), s.masked(), c.flags)
		}
		wantAny := int32(0)
		if c.flags != 0 {
			wantAny = flagMask | flagBoolMask | flagKeyPad
		}
		if s.anyMaskSpec() != wantAny {
			t.Errorf("%+v: the GPU kernels' MASKED %#x, want %#x", c, s.anyMaskSpec(), wantAny)
		}
		p := newAttentionParams(&AttentionPlan{Shape: s}, &s, chunkParams{rows: 4})
		if got := int(p.Heads[2]) & (flagMask | flagBoolMask | flagKeyPad); got != c.flags {
			t.Errorf("%+v: Params mask flags %#x, want %#x", c, got, c.flags)
		}
	}
}
