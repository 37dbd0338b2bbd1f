package pipelines

import "github.com/vkattn/vkattn/core"

// The options of an attention call that its kernels compile in or test
// by a flag, each named once, in one of the two tables below: the score
// variants (SEMANTICS.md §4.1) and the masks. What the specialization
// constants, the Params flags, explain's notes, the GLSL names
// (interface.go), the KV cache's allow-list and the backward pass know of
// an option, they read here.

// ScoreVariants is the set of score variants a call uses, a bit each: the
// kernels' VARIANTS specialization constant.
type ScoreVariants int32

// Score variant bits.
const (
	VariantWindow ScoreVariants = 1 << iota
	VariantSoftcap
	VariantALiBi
	VariantSinks
)

// scoreVariant is one score variant: its bit, the GLSL name of the bit
// and what it does there, explain's name for it, the Options that turn it
// on, whether calls over a KV cache and the backward pass take it, and
// its values per query head where it has them (at slot perHead of each
// head's pair in the BindHeads buffer).
type scoreVariant struct {
	bit      ScoreVariants
	glsl     string
	doc      string
	name     string
	in       func(*core.Options) bool
	cache    bool
	backward bool
	perHead  func(*core.Options) []float32
	slot     int
	// A Params flag the kernels test beside the VARIANTS bit (the
	// combine pass, which has no VARIANTS constant, reads the sinks by
	// it), and its GLSL name; 0 and "" for none.
	flag     int
	flagGLSL string
}

// Slots of a head's values in the BindHeads buffer: attention_params.glsl
// reads a head's sink at 2h and its ALiBi slope at 2h+1.
const (
	headSink, headSlope, headSlots = 0, 1, 2
)

// scoreVariants is every score variant. Its values travel in the Params
// block (Scalars, newAttentionParams) and the per-head buffer (BindHeads).
var scoreVariants = []scoreVariant{
	{VariantWindow, "VAR_WINDOW", "keys outside P.window's band are blocked", "sliding window",
		func(o *core.Options) bool { return o.Window != nil }, true, true, nil, 0, 0, ""},
	{VariantSoftcap, "VAR_SOFTCAP", "s -> c tanh(s / c), c = P.variant.x", "soft-capping",
		func(o *core.Options) bool { return o.Softcap > 0 }, true, true, nil, 0, 0, ""},
	{VariantALiBi, "VAR_ALIBI", "s += slope_h * (j - (t + S - L))", "ALiBi",
		func(o *core.Options) bool { return o.ALiBi != nil }, true, true, func(o *core.Options) []float32 { return o.ALiBi }, headSlope, 0, ""},
	{VariantSinks, "VAR_SINKS", "a logit per head joins the denominator", "attention sinks",
		func(o *core.Options) bool { return o.Sinks != nil }, true, true, func(o *core.Options) []float32 { return o.Sinks }, headSink,
		flagSinks, "FLAG_SINKS"},
}

// VariantsOf is the set of score variants opts uses.
func VariantsOf(opts *core.Options) ScoreVariants {
	var v ScoreVariants
	for _, s := range scoreVariants {
		if s.in(opts) {
			v |= s.bit
		}
	}
	return v
}

// HeadValues is the BindHeads buffer of a call of heads query heads:
// headSlots floats a head, each variant's value at its slot (0 where it is
// off); nil when no variant of opts has values per head.
func HeadValues(opts *core.Options, heads int) []float32 {
	var h []float32
	for _, s := range scoreVariants {
		var vals []float32
		if s.perHead != nil {
			vals = s.perHead(opts)
		}
		if vals == nil {
			continue
		}
		if h == nil {
			h = make([]float32, headSlots*heads)
		}
		for i, x := range vals[:heads] {
			h[headSlots*i+s.slot] = x
		}
	}
	return h
}

// Has reports whether the set holds every variant of w.
func (v ScoreVariants) Has(w ScoreVariants) bool { return v&w == w }

// names are explain's names of the set's variants.
func (v ScoreVariants) names() []string {
	var out []string
	for _, s := range scoreVariants {
		if v.Has(s.bit) {
			out = append(out, s.name)
		}
	}
	return out
}

// Refused is the first variant of the set that a KV cache call (cache) or
// the backward pass (backward) does not take, by explain's name; "" when
// it takes them all.
func (v ScoreVariants) Refused(cache, backward bool) string {
	for _, s := range scoreVariants {
		if v.Has(s.bit) && (cache && !s.cache || backward && !s.backward) {
			return s.name
		}
	}
	return ""
}

// callMask is one mask a call can have: the Params flag bit the kernels
// test (the row kernels' MASKED bit too), its GLSL name, and whether the
// shape has it.
type callMask struct {
	flag  int
	glsl  string
	given func(*AttentionShape) bool
}

// callMasks is every mask. Their buffers and layouts are chunks.go's.
var callMasks = []callMask{
	{flagMask, "FLAG_MASK", func(s *AttentionShape) bool { return s.Mask.Given }},
	{flagBoolMask, "FLAG_BOOLMASK", func(s *AttentionShape) bool { return s.BoolMask.Given }},
	{flagKeyPad, "FLAG_KEYPAD", func(s *AttentionShape) bool { return s.KeyPadding }},
}

// flags are the Params flags of the variants of the set.
func (v ScoreVariants) flags() int {
	flags := 0
	for _, s := range scoreVariants {
		if v.Has(s.bit) {
			flags |= s.flag
		}
	}
	return flags
}

// maskFlags are the flag bits of the masks the shape has.
func (s *AttentionShape) maskFlags() int {
	flags := 0
	for _, m := range callMasks {
		if m.given(s) {
			flags |= m.flag
		}
	}
	return flags
}

// masked reports whether the kernel needs its mask loads.
func (s *AttentionShape) masked() bool { return s.maskFlags() != 0 }

// maskSpec is the row kernels' MASKED specialization constant: the flag
// bit of each mask the call has, so that only those masks' loads are
// compiled in (lavapipe runs both sides of even a uniform branch).
func (s *AttentionShape) maskSpec() int32 { return int32(s.maskFlags()) }

// anyMaskSpec is the GPU kernels' MASKED: every mask's loads where the
// call has any (a GPU skips a uniform branch, so one variant serves every
// mix), none where it has none.
func (s *AttentionShape) anyMaskSpec() int32 {
	if !s.masked() {
		return 0
	}
	all := 0
	for _, m := range callMasks {
		all |= m.flag
	}
	return int32(all)
}

// optionNames are the GLSL names of the tables' bits and of the per-head
// slots, for interface.go.
func optionNames() (variants, masks, heads []glslName) {
	heads = []glslName{{"HEAD_SINK", headSink, "a head's sink"}, {"HEAD_SLOPE", headSlope, "a head's ALiBi slope"},
		{"HEAD_SLOTS", headSlots, "floats a head in the BIND_HEADS buffer"}}
	for _, s := range scoreVariants {
		variants = append(variants, glslName{s.glsl, int(s.bit), s.doc})
	}
	for _, m := range callMasks {
		masks = append(masks, glslName{m.glsl, m.flag, ""})
	}
	for _, s := range scoreVariants {
		if s.flag != 0 {
			masks = append(masks, glslName{s.flagGLSL, s.flag, "the " + s.name + ": the combine pass reads them"})
		}
	}
	return variants, masks, heads
}

// variants is the shape's VARIANTS specialization constant.
func (s *AttentionShape) variants() int32 { return int32(s.Variants) }
