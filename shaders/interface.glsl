// Generated from pipelines.shaderInterface by `go generate ./pipelines`: do not edit.
// The bindings, flag bits, score-variant bits, element types and
// specialization-constant IDs the kernels share with package pipelines,
// named once there.
#ifndef VKATTN_INTERFACE
#define VKATTN_INTERFACE

// attention.comp and attention_tiled.comp bindings (attention_common.glsl)
#define BIND_PARAMS 0 // uniform Params (attention_params.glsl)
#define BIND_Q 1
#define BIND_K 2
#define BIND_V 3
#define BIND_MASK 4 // additive mask
#define BIND_BOOLMASK 5 // boolean masks folded to 0 / -inf
#define BIND_LENGTHS 6 // key lengths [0,B), query lengths [B,2B)
#define BIND_O 7
#define BIND_LSE 8
#define BIND_WEIGHTS 9 // weights, or the split-K partials
#define BIND_KEYPAD 10 // key padding (B, S) as 0 / -inf
#define BIND_HEADS 11 // per-head sinks and ALiBi slopes
#define BIND_PAGETABLE 12 // paged K and V
#define BIND_WA 13 // w_a of additive attention
#define BIND_DO 14 // the backward pass: dO
#define BIND_ROWD 15 // D = dO . O per row
#define BIND_DQ 16
#define BIND_DK 17
#define BIND_DV 18
#define BIND_DSINK 19 // each row's share of its head's sink gradient
#define BIND_DWA 20 // additive: each key row's share of dw_a

// attention_combine.comp bindings
#define CBIND_PARAMS 0
#define CBIND_PARTIALS 1
#define CBIND_O 2
#define CBIND_LSE 3
#define CBIND_LENGTHS 4
#define CBIND_HEADS 5

// linear.comp bindings
#define LBIND_PARAMS 0
#define LBIND_X 1
#define LBIND_W 2
#define LBIND_BIAS 3
#define LBIND_Y 4

// head_mean.comp bindings
#define HBIND_W 0
#define HBIND_MEAN 1

// rope.comp bindings
#define RBIND_X 0
#define RBIND_Y 1
#define RBIND_TABLE 2 // (cos, sin) per table row and frequency
#define RBIND_LENGTHS 3 // a KV cache's key lengths

// q8_store.comp bindings
#define QBIND_X 0
#define QBIND_Y 1 // the q8_0 or q4_0 tensor: quants, then scales
#define QBIND_ROWS 2 // each row's destination element
#define QBIND_STATUS 3 // set to 1 where a block's scale passed float16's range

// attention_merge.comp bindings
#define MBIND_PART_O 0 // the part being merged in
#define MBIND_PART_LSE 1
#define MBIND_O 2 // the merged output, summed part by part
#define MBIND_LSE 3
#define MBIND_SUMS 4 // each row's sum and its compensation, then each element's compensation

// linear_grad.comp bindings
#define GBIND_PARAMS 0
#define GBIND_A 1
#define GBIND_B 2
#define GBIND_C 3 // written, or added to

// regroup.comp bindings
#define XBIND_SRC 0
#define XBIND_DST 1 // written, or added to

// Params flag bits (P.heads.z of attention_params.glsl)
const int FLAG_MASK = 1;
const int FLAG_BOOLMASK = 2;
const int FLAG_CAUSAL = 4;
const int FLAG_LENGTHS = 8;
const int FLAG_LSE = 16;
const int FLAG_WEIGHTS = 32;
const int FLAG_KEYPAD = 64;
const int FLAG_SINKS = 128; // the combine pass reads the sinks
const int FLAG_ALIGN_CAUSAL = 256; // causal mask from each item's key length
const int FLAG_ALIGN_POS = 512; // window and ALiBi positions from each item's key length

// dense-layer flag bits (P.dims.w of linear.comp and linear_coopmat.comp)
const int LFLAG_BIAS = 1; // add the bias

// gradient-product flag bits (P.dims.w of linear_grad.comp)
const int GFLAG_A_ROWS = 1; // A is read along its rows (contiguous in m), not along k
const int GFLAG_ACCUMULATE = 2; // add to C

// regroup.comp flag bits (P.flags)
const int RFLAG_SUM = 1; // sum over i2 instead of copying
const int RFLAG_ACCUMULATE = 2; // add to dst

// score-variant bits (the VARIANTS specialization constant)
const int VAR_WINDOW = 1; // keys outside P.window's band are blocked
const int VAR_SOFTCAP = 2; // s -> c tanh(s / c), c = P.variant.x
const int VAR_ALIBI = 4; // s += slope_h * (j - (t + S - L))
const int VAR_SINKS = 8; // a logit per head joins the denominator

// element types (core.DType, as typeSpec sets the *_TYPE specialization constants)
const int TYPE_F32 = 0;
const int TYPE_F16 = 1;
const int TYPE_BF16 = 2;
const int TYPE_Q8_0 = 3; // K and V only
const int TYPE_Q4_0 = 4; // K and V only
const int TYPE_IQ4_NL = 5; // K and V only

// attention.comp specialization-constant IDs (0: the workgroup size)
#define ATT_SPEC_D4 1 // compile-time bound of d_k and d_v, in vec4s
#define ATT_SPEC_ROWS 2
#define ATT_SPEC_WG 3
#define ATT_SPEC_KEYS 4
#define ATT_SPEC_MASKED 5
#define ATT_SPEC_SHARE 6
#define ATT_SPEC_Q_TYPE 7
#define ATT_SPEC_K_TYPE 8
#define ATT_SPEC_V_TYPE 9
#define ATT_SPEC_VARIANTS 10
#define ATT_SPEC_PAGED 11
#define ATT_SPEC_HALVES8 12 // half inputs read eight a texel (loads.glsl's HALVES8)
#define ATT_SPEC_QUANT_BLOCKS 13 // q8_0 and q4_0 rows of whole blocks (loads.glsl's QUANT_BLOCKS)
#define ATT_SPEC_MASK4 14 // the masks read four keys a fetch (their FLAG_* bits)

// attention_tiled.comp specialization-constant IDs (0: the workgroup size)
#define TILED_SPEC_D4 1 // compile-time bound of d_k and d_v, in vec4s
#define TILED_SPEC_BR 2
#define TILED_SPEC_BC 3
#define TILED_SPEC_LPR 4
#define TILED_SPEC_MASKED 5
#define TILED_SPEC_Q_TYPE 6
#define TILED_SPEC_K_TYPE 7
#define TILED_SPEC_V_TYPE 8
#define TILED_SPEC_VARIANTS 9
#define TILED_SPEC_PAGED 10
#define TILED_SPEC_RPL 11
#define TILED_SPEC_DV4 12 // compile-time bound of d_v, in vec4s (at most D4)
#define TILED_SPEC_V_IN_K 13 // V is the leading d_v columns of K's rows: only K is staged

// attention_coopmat.comp specialization-constant IDs (0: the workgroup size)
#define COOP_SPEC_D4 1 // compile-time bound of d_k and d_v, in vec4s
#define COOP_SPEC_BR 2
#define COOP_SPEC_BC 3
#define COOP_SPEC_MM 4 // the cooperative matrices' M = N = K
#define COOP_SPEC_NSG 5 // subgroups per workgroup
#define COOP_SPEC_SG 6 // lanes per subgroup
#define COOP_SPEC_MASKED 7
#define COOP_SPEC_VARIANTS 8
#define COOP_SPEC_Q_TYPE 9 // element types of Q, K and V: float16 or bfloat16
#define COOP_SPEC_K_TYPE 10
#define COOP_SPEC_V_TYPE 11

// linear.comp specialization-constant IDs (0: the workgroup size)
#define LIN_SPEC_X_TYPE 1
#define LIN_SPEC_W_TYPE 2

// linear_coopmat.comp specialization-constant IDs (0: the workgroup size)
#define LINC_SPEC_MM 1 // the cooperative matrices' M = N = K
#define LINC_SPEC_TILE 2 // rows, outputs and inputs of a workgroup's step
#define LINC_SPEC_SG 3 // lanes per subgroup

// attention_backward.comp specialization-constant IDs (0: the workgroup size)
#define BWD_SPEC_MASKED 1
#define BWD_SPEC_Q_TYPE 2
#define BWD_SPEC_K_TYPE 3
#define BWD_SPEC_V_TYPE 4
#define BWD_SPEC_VARIANTS 5
#define BWD_SPEC_DMAX 6 // compile-time bound of d_k and d_v
#define BWD_SPEC_TILE 7 // rows of the other side staged per tile

// attention_backward_rows.comp specialization-constant IDs (0: the workgroup size)
#define BWR_SPEC_D4 1 // compile-time bound of d_k and d_v, in vec4s
#define BWR_SPEC_ROWS 2 // own rows per invocation
#define BWR_SPEC_WG 3 // the workgroup size
#define BWR_SPEC_STEP 4 // rows of the other side per loop iteration
#define BWR_SPEC_SHARE 5 // lanes sharing each row's loads
#define BWR_SPEC_MASKED 6
#define BWR_SPEC_Q_TYPE 7
#define BWR_SPEC_K_TYPE 8
#define BWR_SPEC_V_TYPE 9
#define BWR_SPEC_VARIANTS 10

// rope.comp specialization-constant IDs (0: the workgroup size)
#define ROPE_SPEC_X_TYPE 1

// q8_store.comp specialization-constant IDs (0: the workgroup size)
#define Q8_SPEC_X_TYPE 1
#define Q8_SPEC_Y_TYPE 2 // a quantized type (elements.glsl)

// linear_grad.comp specialization-constant IDs (0: the workgroup size)
#define GRAD_SPEC_A_TYPE 1
#define GRAD_SPEC_B_TYPE 2

// regroup.comp specialization-constant IDs (0: the workgroup size)
#define REGROUP_SPEC_SRC_TYPE 1

#endif
