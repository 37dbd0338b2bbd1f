#version 450
#extension GL_GOOGLE_include_directive : require
// The backward pass of scaled dot-product attention (SEMANTICS.md §16),
// FlashAttention-2's: nothing L x S is stored; each pass recomputes the
// probabilities P = exp(s - lse) from the forward's log-sum-exp, with
// the same scores, masks and variants as the forward (attention_common).
//
//   D_t   = dO_t . O_t
//   dS_tj = P_tj (dO_t . v_j - D_t) * c'(t, j)   (c': the soft-cap's derivative)
//   dQ_t  = scale sum_j dS_tj k_j                (the query pass)
//   dK_j  = scale sum_{h in group, t} dS_tj q_t  (the key pass, KV_PASS)
//   dV_j  = sum_{h in group, t} P_tj dO_t
//
// ADDITIVE: additive scores s = w_a . tanh(q_t + k_j) on the projected
// queries and keys (width d_k = d_a, no scale): dS flows into them as
// dS w_a (1 - tanh^2), and into w_a as dS tanh(q_t + k_j), which the key
// pass writes per key row (binding BIND_DWA) for the host to sum.
//
// One invocation owns one output row and sums in a fixed order (no
// atomics): the results are the same bits run to run. The query pass
// writes D and each row's share of its head's sink gradient, -P_sink D,
// which the key pass and the host read. Rows are accumulated in the
// output buffers themselves (no private arrays: see attention.comp on
// lavapipe and indexed private arrays). Inputs are read as loads.glsl
// reads them, in any element type; gradients are float32, dense.

#define BACKWARD 1
#include "interface.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = BWD_SPEC_MASKED) const bool MASKED = true;
layout(constant_id = BWD_SPEC_Q_TYPE) const int Q_TYPE = 0;
layout(constant_id = BWD_SPEC_K_TYPE) const int K_TYPE = 0;
layout(constant_id = BWD_SPEC_V_TYPE) const int V_TYPE = 0;
layout(constant_id = BWD_SPEC_VARIANTS) const int VARIANTS = 0;
const bool PAGED = false;

#include "attention_common.glsl"

#include "attention_backward_common.glsl"

// dotQK is the raw score: q . k, or additive w_a . tanh(q + k).
float dotQK(int qb, int kb) {
    float s = 0.0;
    for (int i = 0; i < DK; i++) {
#ifdef ADDITIVE
        s += waData[i] * tanh(AT(Qt, Q_TYPE, qb + i) + AT(Kt, K_TYPE, kb + i));
#else
        s += AT(Qt, Q_TYPE, qb + i) * AT(Kt, K_TYPE, kb + i);
#endif
    }
    return s;
}

// scoreGrad is d(raw score)/d(element i of q), the same as of k's: k_i
// for dot products (given as other), w_a (1 - tanh^2(q_i + k_i)) for
// additive scores.
float scoreGrad(int i, float qi, float ki, float other) {
#ifdef ADDITIVE
    float t = tanh(qi + ki);
    return waData[i] * (1.0 - t * t);
#else
    return other;
#endif
}

float dotDOV(int r, int vb) {
    float s = 0.0;
    for (int i = 0; i < DV; i++) {
        s += dO[r * DV + i] * AT(Vt, V_TYPE, vb + i);
    }
    return s;
}

// dsOf is dS_tj / scale' for query row t of head h against key j, and P_tj
// (0 where the key is blocked: then dS is 0 too).
float dsOf(int h, int t, int j, float lse, float d, float slope, int qb, int kb, int r, out float p) {
    float qk = dotQK(qb, kb);
    float s = scoreOf(qk, t, h, slope, j, keyLen);
    p = s == NEG_INF ? 0.0 : exp(s - lse);
    if (p == 0.0) {
        return 0.0;
    }
    return p * (dotDOV(r, vBase(j)) - d) * capGrad(qk);
}

void main() {
    L = P.dims.x;
    H = P.split.w; // the call's query heads
    int group = P.heads.y;
    int bi = int(gl_GlobalInvocationID.z);
    beginItem(bi);
    float scale = P.scaling.x;
#ifdef KV_PASS
    // One key row j of KV head hk.
    int j = int(gl_GlobalInvocationID.x);
    hk = int(gl_GlobalInvocationID.y);
    if (j >= S) {
        return;
    }
    int outK = ((b * (H / group) + hk) * S + j) * DK;
    int outV = ((b * (H / group) + hk) * S + j) * DV;
    for (int i = 0; i < DK; i++) {
        dK[outK + i] = 0.0;
#ifdef ADDITIVE
        dWa[outK + i] = 0.0;
#endif
    }
    for (int i = 0; i < DV; i++) {
        dV[outV + i] = 0.0;
    }
    if (j >= keyLen) {
        return; // never visible
    }
    int kb = kBase(j);
    for (int g = 0; g < group; g++) {
        int h = hk * group + g;
        float slope = slopeOf(h);
        for (int t = 0; t < min(L, queryLen); t++) {
            int r = rowOf(h, t);
            float lse = lseData[r];
            if (lse == NEG_INF) {
                continue;
            }
            float p;
            int qb = qBase(h, t);
            float ds = dsOf(h, t, j, lse, rowD[r], slope, qb, kb, r, p);
            if (p == 0.0) {
                continue;
            }
            for (int i = 0; i < DV; i++) {
                dV[outV + i] += p * dO[r * DV + i];
            }
            float g2 = ds * scale;
            for (int i = 0; i < DK; i++) {
                float qi = AT(Qt, Q_TYPE, qb + i);
#ifdef ADDITIVE
                float ki = AT(Kt, K_TYPE, kb + i);
                dK[outK + i] += ds * scoreGrad(i, qi, ki, 0.0);
                dWa[outK + i] += ds * tanh(qi + ki);
#else
                dK[outK + i] += g2 * qi;
#endif
            }
        }
    }
#else
    // One query row t of head h.
    int t = int(gl_GlobalInvocationID.x);
    int h = int(gl_GlobalInvocationID.y);
    if (t >= L) {
        return;
    }
    hk = h / group;
    int r = rowOf(h, t);
    for (int i = 0; i < DK; i++) {
        dQ[r * DK + i] = 0.0;
    }
    float lse = lseData[r];
    bool padded = t >= queryLen;
    float d = 0.0;
    if (!padded && lse != NEG_INF) {
        int ob = oBase(h, t);
        for (int i = 0; i < DV; i++) {
            d += dO[r * DV + i] * oData[ob + i];
        }
    }
    rowD[r] = d;
    float sinkGrad = 0.0;
    if ((VARIANTS & VAR_SINKS) != 0 && !padded && lse != NEG_INF) {
        // dL/dsink = -P_sink D: the sink takes probability from the keys.
        sinkGrad = -exp(headData[2 * h] - lse) * d;
    }
    dSink[r] = sinkGrad;
    if (padded || lse == NEG_INF) {
        return;
    }
    float slope = slopeOf(h);
    int keyBegin = 0, keyEnd = keyLen;
    keyRange(t, t, keyBegin, keyEnd);
    int qb = qBase(h, t);
    for (int j = keyBegin; j < keyEnd; j++) {
        float p;
        int kb = kBase(j);
        float ds = dsOf(h, t, j, lse, d, slope, qb, kb, r, p);
        if (p == 0.0) {
            continue;
        }
        float g2 = ds * scale;
        for (int i = 0; i < DK; i++) {
#ifdef ADDITIVE
            dQ[r * DK + i] += ds * scoreGrad(i, AT(Qt, Q_TYPE, qb + i), AT(Kt, K_TYPE, kb + i), 0.0);
#else
            dQ[r * DK + i] += g2 * AT(Kt, K_TYPE, kb + i);
#endif
        }
    }
#endif
}
