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
// DescriptorSet, SpecId, read and write access) back against it.

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

// Specialization-constant IDs. 0 is every kernel's workgroup size
// (local_size_x_id); the rest are each family's own.
const (
	specLocalSize = 0

	// attention.comp (the row kernels, additive too).
	attSpecD4, attSpecRows, attSpecWG, attSpecKeys, attSpecMasked, attSpecShare = 1, 2, 3, 4, 5, 6
	attSpecQType, attSpecKType, attSpecVType, attSpecVariants, attSpecPaged     = 7, 8, 9, 10, 11
	attSpecHalves8, attSpecQuantBlocks, attSpecMask4                            = 12, 13, 14
	attSpecCount                                                                = 15

	// attention_tiled.comp.
	tiledSpecD4, tiledSpecBR, tiledSpecBC, tiledSpecLPR, tiledSpecMasked = 1, 2, 3, 4, 5
	tiledSpecQType, tiledSpecKType, tiledSpecVType, tiledSpecVariants    = 6, 7, 8, 9
	tiledSpecPaged, tiledSpecRPL, tiledSpecDV4, tiledSpecVInK            = 10, 11, 12, 13
	tiledSpecCount                                                       = 14

	// attention_coopmat.comp.
	coopSpecD4, coopSpecBR, coopSpecBC, coopSpecMM, coopSpecNSG, coopSpecSG = 1, 2, 3, 4, 5, 6
	coopSpecMasked, coopSpecVariants, coopSpecQType, coopSpecKType          = 7, 8, 9, 10
	coopSpecVType, coopSpecCount                                            = 11, 12

	// linear.comp.
	linSpecXType, linSpecWType, linSpecCount = 1, 2, 3

	// linear_coopmat.comp.
	lincSpecMM, lincSpecTile, lincSpecSG, lincSpecCount = 1, 2, 3, 4

	// attention_backward.comp.
	bwdSpecMasked, bwdSpecQType, bwdSpecKType, bwdSpecVType, bwdSpecVariants = 1, 2, 3, 4, 5
	bwdSpecDMax, bwdSpecTile, bwdSpecCount                                   = 6, 7, 8

	// attention_backward_rows.comp.
	bwrSpecD4, bwrSpecRows, bwrSpecWG, bwrSpecStep, bwrSpecShare, bwrSpecMasked = 1, 2, 3, 4, 5, 6
	bwrSpecQType, bwrSpecKType, bwrSpecVType, bwrSpecVariants, bwrSpecCount     = 7, 8, 9, 10, 11

	// rope.comp.
	ropeSpecXType, ropeSpecCount = 1, 2

	// q8_store.comp: the input's type and the output's (quantized).
	q8SpecXType, q8SpecYType, q8SpecCount = 1, 2, 3

	// linear_grad.comp and regroup.comp: their operands' types.
	gradSpecAType, gradSpecBType, gradSpecCount = 1, 2, 3
	regroupSpecSrcType, regroupSpecCount        = 1, 2
)

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
	{"Params flag bits (P.heads.z of attention_params.glsl)", true, []glslName{
		{"FLAG_MASK", flagMask, ""}, {"FLAG_BOOLMASK", flagBoolMask, ""}, {"FLAG_CAUSAL", flagCausal, ""},
		{"FLAG_LENGTHS", flagLengths, ""}, {"FLAG_LSE", flagLSE, ""}, {"FLAG_WEIGHTS", flagWeights, ""},
		{"FLAG_KEYPAD", flagKeyPad, ""}, {"FLAG_SINKS", flagSinks, "the combine pass reads the sinks"},
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
	{"score-variant bits (the VARIANTS specialization constant)", true, []glslName{
		{"VAR_WINDOW", variantWindow, "keys outside P.window's band are blocked"},
		{"VAR_SOFTCAP", variantSoftcap, "s -> c tanh(s / c), c = P.variant.x"},
		{"VAR_ALIBI", variantALiBi, "s += slope_h * (j - (t + S - L))"},
		{"VAR_SINKS", variantSinks, "a logit per head joins the denominator"},
	}},
	{"element types (core.DType, as typeSpec sets the *_TYPE specialization constants)", true, elementTypeNames()},
	{"attention.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"ATT_SPEC_D4", attSpecD4, "compile-time bound of d_k and d_v, in vec4s"},
		{"ATT_SPEC_ROWS", attSpecRows, ""}, {"ATT_SPEC_WG", attSpecWG, ""}, {"ATT_SPEC_KEYS", attSpecKeys, ""},
		{"ATT_SPEC_MASKED", attSpecMasked, ""}, {"ATT_SPEC_SHARE", attSpecShare, ""},
		{"ATT_SPEC_Q_TYPE", attSpecQType, ""}, {"ATT_SPEC_K_TYPE", attSpecKType, ""}, {"ATT_SPEC_V_TYPE", attSpecVType, ""},
		{"ATT_SPEC_VARIANTS", attSpecVariants, ""}, {"ATT_SPEC_PAGED", attSpecPaged, ""},
		{"ATT_SPEC_HALVES8", attSpecHalves8, "half inputs read eight a texel (loads.glsl's HALVES8)"},
		{"ATT_SPEC_QUANT_BLOCKS", attSpecQuantBlocks, "q8_0 and q4_0 rows of whole blocks (loads.glsl's QUANT_BLOCKS)"},
		{"ATT_SPEC_MASK4", attSpecMask4, "the masks read four keys a fetch (their FLAG_* bits)"},
	}},
	{"attention_tiled.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"TILED_SPEC_D4", tiledSpecD4, "compile-time bound of d_k and d_v, in vec4s"}, {"TILED_SPEC_BR", tiledSpecBR, ""}, {"TILED_SPEC_BC", tiledSpecBC, ""},
		{"TILED_SPEC_LPR", tiledSpecLPR, ""}, {"TILED_SPEC_MASKED", tiledSpecMasked, ""},
		{"TILED_SPEC_Q_TYPE", tiledSpecQType, ""}, {"TILED_SPEC_K_TYPE", tiledSpecKType, ""}, {"TILED_SPEC_V_TYPE", tiledSpecVType, ""},
		{"TILED_SPEC_VARIANTS", tiledSpecVariants, ""}, {"TILED_SPEC_PAGED", tiledSpecPaged, ""}, {"TILED_SPEC_RPL", tiledSpecRPL, ""},
		{"TILED_SPEC_DV4", tiledSpecDV4, "compile-time bound of d_v, in vec4s (at most D4)"},
		{"TILED_SPEC_V_IN_K", tiledSpecVInK, "V is the leading d_v columns of K's rows: only K is staged"},
	}},
	{"attention_coopmat.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"COOP_SPEC_D4", coopSpecD4, "compile-time bound of d_k and d_v, in vec4s"},
		{"COOP_SPEC_BR", coopSpecBR, ""}, {"COOP_SPEC_BC", coopSpecBC, ""},
		{"COOP_SPEC_MM", coopSpecMM, "the cooperative matrices' M = N = K"},
		{"COOP_SPEC_NSG", coopSpecNSG, "subgroups per workgroup"}, {"COOP_SPEC_SG", coopSpecSG, "lanes per subgroup"},
		{"COOP_SPEC_MASKED", coopSpecMasked, ""}, {"COOP_SPEC_VARIANTS", coopSpecVariants, ""},
		{"COOP_SPEC_Q_TYPE", coopSpecQType, "element types of Q, K and V: float16 or bfloat16"},
		{"COOP_SPEC_K_TYPE", coopSpecKType, ""}, {"COOP_SPEC_V_TYPE", coopSpecVType, ""},
	}},
	{"linear.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"LIN_SPEC_X_TYPE", linSpecXType, ""}, {"LIN_SPEC_W_TYPE", linSpecWType, ""},
	}},
	{"linear_coopmat.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"LINC_SPEC_MM", lincSpecMM, "the cooperative matrices' M = N = K"},
		{"LINC_SPEC_TILE", lincSpecTile, "rows, outputs and inputs of a workgroup's step"},
		{"LINC_SPEC_SG", lincSpecSG, "lanes per subgroup"},
	}},
	{"attention_backward.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"BWD_SPEC_MASKED", bwdSpecMasked, ""}, {"BWD_SPEC_Q_TYPE", bwdSpecQType, ""}, {"BWD_SPEC_K_TYPE", bwdSpecKType, ""},
		{"BWD_SPEC_V_TYPE", bwdSpecVType, ""}, {"BWD_SPEC_VARIANTS", bwdSpecVariants, ""},
		{"BWD_SPEC_DMAX", bwdSpecDMax, "compile-time bound of d_k and d_v"},
		{"BWD_SPEC_TILE", bwdSpecTile, "rows of the other side staged per tile"},
	}},
	{"attention_backward_rows.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"BWR_SPEC_D4", bwrSpecD4, "compile-time bound of d_k and d_v, in vec4s"},
		{"BWR_SPEC_ROWS", bwrSpecRows, "own rows per invocation"}, {"BWR_SPEC_WG", bwrSpecWG, "the workgroup size"},
		{"BWR_SPEC_STEP", bwrSpecStep, "rows of the other side per loop iteration"},
		{"BWR_SPEC_SHARE", bwrSpecShare, "lanes sharing each row's loads"}, {"BWR_SPEC_MASKED", bwrSpecMasked, ""},
		{"BWR_SPEC_Q_TYPE", bwrSpecQType, ""}, {"BWR_SPEC_K_TYPE", bwrSpecKType, ""}, {"BWR_SPEC_V_TYPE", bwrSpecVType, ""},
		{"BWR_SPEC_VARIANTS", bwrSpecVariants, ""},
	}},
	{"rope.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"ROPE_SPEC_X_TYPE", ropeSpecXType, ""},
	}},
	{"q8_store.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"Q8_SPEC_X_TYPE", q8SpecXType, ""}, {"Q8_SPEC_Y_TYPE", q8SpecYType, "a quantized type (elements.glsl)"},
	}},
	{"linear_grad.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"GRAD_SPEC_A_TYPE", gradSpecAType, ""}, {"GRAD_SPEC_B_TYPE", gradSpecBType, ""},
	}},
	{"regroup.comp specialization-constant IDs (0: the workgroup size)", false, []glslName{
		{"REGROUP_SPEC_SRC_TYPE", regroupSpecSrcType, ""},
	}},
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

// specCount is how many specialization constants the Go side gives
// variant v's kernel (IDs 0 to specCount-1); 0 for families it does not
// build.
func specCount(v Variant) int {
	switch v.Family {
	case FamilyAttention, FamilyAdditive:
		return attSpecCount
	case FamilyTiled:
		return tiledSpecCount
	case FamilyCoopmat:
		return coopSpecCount
	case FamilyLinear:
		return linSpecCount
	case FamilyLinearCoopmat:
		return lincSpecCount
	case FamilyRoPE:
		return ropeSpecCount
	case FamilyQ8Store:
		return q8SpecCount
	case FamilyBackwardQ, FamilyBackwardKV, FamilyAdditiveBackwardQ, FamilyAdditiveBackwardKV:
		return bwdSpecCount
	case FamilyBackwardRowsQ, FamilyBackwardRowsKV:
		return bwrSpecCount
	case FamilyMerge:
		return 1 // the workgroup size only
	case FamilyLinearGrad:
		return gradSpecCount
	case FamilyRegroup:
		return regroupSpecCount
	case FamilyCombine, FamilyHeadMean:
		return 0
	}
	return -1
}
