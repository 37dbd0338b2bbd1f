// What the backward kernels (attention_backward.comp, the row passes, and
// attention_backward_tiled.comp, the GPU passes) share: the inputs, the
// pass's own bindings, where rows live, and the soft-cap's derivative.
// Before including, a kernel defines BACKWARD, its specialization
// constants, KV_PASS or not, and includes attention_common.glsl.

#include "loads.glsl"
INPUT(BIND_Q, Qt)
INPUT(BIND_K, Kt)
INPUT(BIND_V, Vt)
#define Qt_SCALES 0
#define Kt_SCALES P.kStride.w
#define Vt_SCALES P.vStride.w

// The row passes accumulate the gradients in their buffers; the tiled
// passes in registers, writing each row once (GRAD_ACCESS writeonly).
#ifndef GRAD_ACCESS
#define GRAD_ACCESS
#endif

layout(std430, binding = BIND_DO) readonly buffer DOBuf { float dO[]; };
#ifdef ADDITIVE
layout(std430, binding = BIND_WA) readonly buffer WaBuf { float waData[]; };
#ifdef KV_PASS
layout(std430, binding = BIND_DWA) buffer DWaBuf { float dWa[]; };
#endif
#endif
#ifdef KV_PASS
layout(std430, binding = BIND_ROWD) readonly buffer RowDBuf { float rowD[]; };
layout(std430, binding = BIND_DK) GRAD_ACCESS buffer DKBuf { float dK[]; };
layout(std430, binding = BIND_DV) GRAD_ACCESS buffer DVBuf { float dV[]; };
#else
layout(std430, binding = BIND_ROWD) writeonly buffer RowDBuf { float rowD[]; };
layout(std430, binding = BIND_DQ) GRAD_ACCESS buffer DQBuf { float dQ[]; };
layout(std430, binding = BIND_DSINK) writeonly buffer DSinkBuf { float dSink[]; };
#endif

int H;

int qBase(int h, int t) { return P.offsets.x + b * P.qStride.x + h * P.qStride.y + t * P.qStride.z; }
int kBase(int j) { return P.offsets.y + hk * P.kStride.y + keyRow(P.kStride, j); }
int vBase(int j) { return P.offsets.z + hk * P.vStride.y + keyRow(P.vStride, j); }
int oBase(int h, int t) { return P.offsets.w + b * P.oStride.x + h * P.oStride.y + t * P.oStride.z; }
// dO, the log-sum-exp and D are dense (B, H, L[, d_v]).
int rowOf(int h, int t) { return (b * H + h) * L + t; }

// capGrad is d(score)/d(scaled dot product): the soft-cap's 1 - tanh^2.
float capGrad(float qk) {
    if ((VARIANTS & VAR_SOFTCAP) == 0) {
        return 1.0;
    }
    float c = P.variant.x;
    float y = softcap(qk * P.scaling.x, c) / c;
    return 1.0 - y * y;
}

