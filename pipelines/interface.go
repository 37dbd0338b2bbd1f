package pipelines

import (
	"fmt"
	"strings"

	"github.com/vkattn/vkattn/core"
)

// The shader interface: every descriptor binding, Params flag bit,
// score-variant bit, element-type code and specialization-constant ID
// that the kernels of this package share with their GLSL, named once
// here. `go generate ./pipelines` writes shaders/interface.glsl from this
// table, the shaders use its names (never a number), and
// TestShaderInterface reads each embedded SPIR-V's decorations (Binding,
// DescriptorSet, read and write access) back against it. The
// specialization-constant IDs are spec.go's (TestSpecConstantsByName), the
// parameter blocks blocks.go's (TestBlocksMatchGLSL).

// glslName is one named constant of the interface.
type glslName struct {
	name  string
	value int
	doc   string
}

// interfaceSection is a group of names, written as #defines (bindings and
// specialization-constant IDs: layout qualifiers take them) or as const
// ints (flag bits the code tests).
type interfaceSection struct {
	title  string
	consts bool
	names  []glslName
}

// The combine pass's, the dense layer's and the head mean's bindings.
const (
	combineBindParams, combineBindPartials, combineBindO, combineBindLSE, combineBindLengths, combineBindHeads = 0, 1, 2, 3, 4, 5
	LinearBindParams, linearBindX, linearBindW, linearBindBias, linearBindY                                    = 0, 1, 2, 3, 4
	headMeanBindW, headMeanBindMean                                                                            = 0, 1
	ropeBindX, ropeBindY, ropeBindTable, ropeBindLengths                                                       = 0, 1, 2, 3
	q8BindX, q8BindY, q8BindRows, q8BindStatus                                                                 = 0, 1, 2, 3
	mergeBindPartO, mergeBindPartLSE, mergeBindO, mergeBindLSE, mergeBindSums                                  = 0, 1, 2, 3, 4
	GradBindParams, gradBindA, gradBindB, gradBindC                                                            = 0, 1, 2, 3
	regroupBindSrc, regroupBindDst                                                                             = 0, 1
)

// The option tables' names (options.go).
var variantNames, maskNames, headNames = optionNames()

var shaderInterface = []interfaceSection{
	{"attention.comp and attention_tiled.comp bindings (attention_common.glsl)", false, []glslName{
		{"BIND_PARAMS", BindParams, "uniform Params (attention_params.glsl)"},
		{"BIND_Q", BindQ, ""}, {"BIND_K", BindK, ""}, {"BIND_V", BindV, ""},
		{"BIND_MASK", BindMask, "additive mask"},
		{"BIND_BOOLMASK", BindBoolMask, "boolean masks folded to 0 / -inf"},
		{"BIND_LENGTHS", BindLengths, "key lengths [0,B), query lengths [B,2B)"},
		{"BIND_O", BindO, ""}, {"BIND_LSE", BindLSE, ""},
		{"BIND_WEIGHTS", BindWeights, "weights, or the split-K partials"},
		{"BIND_KEYPAD", BindKeyPadding, "key padding (B, S) as 0 / -inf"},
		{"BIND_HEADS", BindHeads, "per-head sinks and ALiBi slopes"},
		{"BIND_PAGETABLE", BindPageTable, "paged K and V"},
		{"BIND_WA", BindWA, "w_a of additive attention"},
		{"BIND_DO", BindDO, "the backward pass: dO"}, {"BIND_ROWD", BindRowD, "D = dO . O per row"},
		{"BIND_DQ", BindDQ, ""}, {"BIND_DK", BindDK, ""}, {"BIND_DV", BindDV, ""},
		{"BIND_DSINK", BindDSink, "each row's share of its head's sink gradient"},
		{"BIND_DWA", BindDWA, "additive: each key row's share of dw_a"},
	}},
	{"attention_combine.comp bindings", false, []glslName{
		{"CBIND_PARAMS", combineBindParams, ""}, {"CBIND_PARTIALS", combineBindPartials, ""},
		{"CBIND_O", combineBindO, ""}, {"CBIND_LSE", combineBindLSE, ""},
		{"CBIND_LENGTHS", combineBindLengths, ""}, {"CBIND_HEADS", combineBindHeads, ""},
	}},
	{"linear.comp bindings", false, []glslName{
		{"LBIND_PARAMS", LinearBindParams, ""}, {"LBIND_X", linearBindX, ""}, {"LBIND_W", linearBindW, ""},
		{"LBIND_BIAS", linearBindBias, ""}, {"LBIND_Y", linearBindY, ""},
	}},
	{"head_mean.comp bindings", false, []glslName{
		{"HBIND_W", headMeanBindW, ""}, {"HBIND_MEAN", headMeanBindMean, ""},
	}},
	{"rope.comp bindings", false, []glslName{
		{"RBIND_X", ropeBindX, ""}, {"RBIND_Y", ropeBindY, ""}, {"RBIND_TABLE", ropeBindTable, "(cos, sin) per table row and frequency"},
		{"RBIND_LENGTHS", ropeBindLengths, "a KV cache's key lengths"},
	}},
	{"q8_store.comp bindings", false, []glslName{
		{"QBIND_X", q8BindX, ""}, {"QBIND_Y", q8BindY, "the q8_0 or q4_0 tensor: quants, then scales"},
		{"QBIND_ROWS", q8BindRows, "each row's destination element"},
		{"QBIND_STATUS", q8BindStatus, "set to 1 where a block's scale passed float16's range"},
	}},
	{"attention_merge.comp bindings", false, []glslName{
		{"MBIND_PART_O", mergeBindPartO, "the part being merged in"}, {"MBIND_PART_LSE", mergeBindPartLSE, ""},
		{"MBIND_O", mergeBindO, "the merged output, summed part by part"}, {"MBIND_LSE", mergeBindLSE, ""},
		{"MBIND_SUMS", mergeBindSums, "each row's sum and its compensation, then each element's compensation"},
	}},
	{"linear_grad.comp bindings", false, []glslName{
		{"GBIND_PARAMS", GradBindParams, ""}, {"GBIND_A", gradBindA, ""}, {"GBIND_B", gradBindB, ""},
		{"GBIND_C", gradBindC, "written, or added to"},
	}},
	{"regroup.comp bindings", false, []glslName{
		{"XBIND_SRC", regroupBindSrc, ""}, {"XBIND_DST", regroupBindDst, "written, or added to"},
	}},
	{"per-head values of the score variants (BIND_HEADS; options.go)", true, headNames},
	{"the options' flag bits (Params flags; the masks' the MASKED specialization constant too; options.go)", true, maskNames},
	{"Params flag bits (paramFlags() of attention_params.glsl)", true, []glslName{
		{"FLAG_CAUSAL", flagCausal, ""},
		{"FLAG_LENGTHS", flagLengths, ""}, {"FLAG_LSE", flagLSE, ""}, {"FLAG_WEIGHTS", flagWeights, ""},
		{"FLAG_ALIGN_CAUSAL", flagAlignCausal, "causal mask from each item's key length"},
		{"FLAG_ALIGN_POS", flagAlignPos, "window and ALiBi positions from each item's key length"},
	}},
	{"dense-layer flag bits (P.dims.w of linear.comp and linear_coopmat.comp)", true, []glslName{
		{"LFLAG_BIAS", linearFlagBias, "add the bias"},
	}},
	{"gradient-product flag bits (P.dims.w of linear_grad.comp)", true, []glslName{
		{"GFLAG_A_ROWS", gradFlagARows, "A is read along its rows (contiguous in m), not along k"},
		{"GFLAG_ACCUMULATE", gradFlagAccumulate, "add to C"},
	}},
	{"regroup.comp flag bits (P.flags)", true, []glslName{
		{"RFLAG_SUM", regroupFlagSum, "sum over i2 instead of copying"},
		{"RFLAG_ACCUMULATE", regroupFlagAccumulate, "add to dst"},
	}},
	{"score-variant bits (the VARIANTS specialization constant; options.go)", true, variantNames},
	{"element types (core.DType, as typeSpec sets the *_TYPE specialization constants)", true, elementTypeNames()},
	{"specialization-constant IDs, one per meaning in every family (spec.go; 0: the workgroup size)", false, specIDs},
}

// ShaderInterface is the text of shaders/interface.glsl.
func ShaderInterface() string {
	var b strings.Builder
	b.WriteString(`// Generated from pipelines.shaderInterface by ` + "`go generate ./pipelines`" + `: do not edit.
// The bindings, flag bits, score-variant bits, element types and
// specialization-constant IDs the kernels share with package pipelines,
// named once there.
#ifndef VKATTN_INTERFACE
#define VKATTN_INTERFACE
`)
	for _, s := range shaderInterface {
		fmt.Fprintf(&b, "\n// %s\n", s.title)
		for _, n := range s.names {
			line := fmt.Sprintf("#define %s %d", n.name, n.value)
			if s.consts {
				line = fmt.Sprintf("const int %s = %d;", n.name, n.value)
			}
			if n.doc != "" {
				line += " // " + n.doc
			}
			b.WriteString(line + "\n")
		}
	}
	b.WriteString("\n#endif\n")
	return b.String()
}

// access is how a kernel uses a storage binding.
type access int

const (
	readOnly access = iota
	writeOnly
	readWrite
)

// bindingUse is one binding of a kernel family as the Go side binds it.
type bindingUse struct {
	kind core.BindingType
	use  access
}

// familyBindings is what the Go side binds for variant v, by binding
// index: the table TestShaderInterface checks each SPIR-V against.
func familyBindings(v Variant) []bindingUse {
	uses := func(kinds []core.BindingType, written ...int) []bindingUse {
		out := make([]bindingUse, len(kinds))
		for i, k := range kinds {
			out[i] = bindingUse{kind: k}
		}
		for _, w := range written {
			out[w].use = writeOnly
		}
		return out
	}
	switch v.Family {
	case FamilyAttention, FamilyAdditive, FamilyTiled, FamilyCoopmat:
		p := AttentionPlan{Variant: v, Path: v.Path, KernelLayout: core.KernelLayout{Vec4: v.Vec4, Additive: v.Family == FamilyAdditive}}
		return uses(attentionBindingTypes(p), BindO, BindLSE, BindWeights)
	case FamilyCombine:
		return uses(combineBindingTypes(), combineBindO, combineBindLSE)
	case FamilyLinear, FamilyLinearCoopmat:
		return uses(linearBindingTypes(LinearPlan{Path: v.Path, LinearLayout: core.LinearLayout{Vec4: v.Vec4}}), linearBindY)
	case FamilyHeadMean:
		return uses(headMeanBindingTypes(), headMeanBindMean)
	case FamilyRoPE:
		return uses(ropeBindingTypes(), ropeBindY)
	case FamilyBackwardQ, FamilyAdditiveBackwardQ:
		return uses(backwardBindingTypes(), BindRowD, BindDSink, BindDQ)
	case FamilyBackwardKV, FamilyAdditiveBackwardKV:
		return uses(backwardBindingTypes(), BindDK, BindDV, BindDWA)
	case FamilyBackwardRowsQ:
		return uses(backwardRowsBindingTypes(false, core.Float32, core.Float32, core.Float32), BindRowD, BindDSink, BindDQ)
	case FamilyBackwardRowsKV:
		return uses(backwardRowsBindingTypes(true, core.Float32, core.Float32, core.Float32), BindDK, BindDV)
	case FamilyQ8Store:
		u := uses(q8StoreBindingTypes())
		u[q8BindY].use, u[q8BindStatus].use = readWrite, readWrite // quants written, scale words set half by half; the status or-ed
		return u
	case FamilyMerge:
		u := uses(mergeBindingTypes())
		u[mergeBindO].use, u[mergeBindLSE].use, u[mergeBindSums].use = readWrite, readWrite, readWrite // accumulated part by part
		return u
	case FamilyLinearGrad:
		u := uses(gradBindingTypes(GradPlan{Path: v.Path, Vec4: v.Vec4}))
		u[gradBindC].use = readWrite // GFLAG_ACCUMULATE adds to C
		return u
	case FamilyRegroup:
		u := uses(regroupBindingTypes())
		u[regroupBindDst].use = readWrite // RFLAG_ACCUMULATE adds to dst
		return u
	}
	return nil
}
