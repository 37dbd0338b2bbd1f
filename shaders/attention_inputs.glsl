// Q, K and V of the fused attention kernels (forward and backward), read
// as loads.glsl reads an input of any element type. Before including, a
// kernel defines what loads.glsl reads (TEXEL_LOADS, VEC4_LOADS, ...) and
// includes attention_common.glsl (the Params block).

#include "loads.glsl"
INPUT(BIND_Q, Qt)
INPUT(BIND_K, Kt)
INPUT(BIND_V, Vt)
// Where a quantized K or V keeps its block scales (loads.glsl; read only
// by the kernels compiled with QUANT_LOADS); Q is never quantized.
#define Qt_SCALES 0
#define Kt_SCALES P.kStride.w
#define Vt_SCALES P.vStride.w
