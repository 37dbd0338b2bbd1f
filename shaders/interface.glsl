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

// per-head values of the score variants (BIND_HEADS; options.go)
const int HEAD_SINK = 0; // a head's sink
const int HEAD_SLOPE = 1; // a head's ALiBi slope
const int HEAD_SLOTS = 2; // floats a head in the BIND_HEADS buffer

// the options' flag bits (Params flags; the masks' the MASKED specialization constant too; options.go)
const int FLAG_MASK = 1;
const int FLAG_BOOLMASK = 2;
const int FLAG_KEYPAD = 64;
const int FLAG_SINKS = 128; // the attention sinks: the combine pass reads them

// Params flag bits (paramFlags() of attention_params.glsl)
const int FLAG_CAUSAL = 4;
const int FLAG_LENGTHS = 8;
const int FLAG_LSE = 16;
const int FLAG_WEIGHTS = 32;
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

// score-variant bits (the VARIANTS specialization constant; options.go)
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

// specialization-constant IDs, one per meaning in every family (spec.go; 0: the workgroup size)
#define SPEC_D4 1 // compile-time bound of d_k and d_v, in vec4s
#define SPEC_DV4 2 // compile-time bound of d_v, in vec4s (at most D4)
#define SPEC_ROWS 3 // rows per invocation
#define SPEC_WG 4 // the workgroup size, as a constant the code can size arrays with
#define SPEC_KEYS 5 // keys per online-softmax step
#define SPEC_SHARE 6 // lanes sharing each row's loads
#define SPEC_MASKED 7 // FLAG_* bits of the masks whose loads are compiled in
#define SPEC_Q_TYPE 8 // element type of Q (TYPE_*)
#define SPEC_K_TYPE 9 // element type of K
#define SPEC_V_TYPE 10 // element type of V
#define SPEC_VARIANTS 11 // VAR_* bits of the score variants compiled in
#define SPEC_PAGED 12 // K and V read through a page table
#define SPEC_HALVES8 13 // half inputs read eight a texel (loads.glsl's HALVES8)
#define SPEC_QUANT_BLOCKS 14 // quantized rows of whole blocks (loads.glsl's QUANT_BLOCKS)
#define SPEC_MASK4 15 // the masks read four keys a fetch (their FLAG_* bits)
#define SPEC_BR 16 // query rows per workgroup
#define SPEC_BC 17 // keys per tile
#define SPEC_LPR 18 // lanes per row
#define SPEC_RPL 19 // query rows per lane group
#define SPEC_V_IN_K 20 // V is the leading d_v columns of K's rows: only K is staged
#define SPEC_MM 21 // the cooperative matrices' M = N = K
#define SPEC_NSG 22 // subgroups per workgroup
#define SPEC_SG 23 // lanes per subgroup
#define SPEC_DMAX 24 // compile-time bound of d_k and d_v
#define SPEC_TILE 25 // rows staged per tile or step
#define SPEC_STEP 26 // rows of the other side per loop iteration
#define SPEC_X_TYPE 27 // element type of the input X
#define SPEC_W_TYPE 28 // element type of the weights W
#define SPEC_Y_TYPE 29 // element type of the output Y
#define SPEC_A_TYPE 30 // element type of A
#define SPEC_B_TYPE 31 // element type of B
#define SPEC_SRC_TYPE 32 // element type of the source

#endif
