#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// The backward pass of scaled dot-product attention for GPUs
// (SEMANTICS.md §16), workgroup-tiled as FlashAttention-2's backward: the
// same sums as attention_backward.comp in the same order, with each
// invocation's row and its gradient held in registers and the other
// side's rows staged in shared memory a tile at a time by the whole
// workgroup, so every row read from memory serves WG invocations.
//
//   query pass: an invocation owns query row t of head h: q_t, dO_t and
//     dQ_t in registers; the workgroup walks the keys its rows can see,
//     TILE rows of K and V at a time, and writes D_t and the row's share of
//     its head's sink gradient as the row pass does.
//   key pass (KV_PASS): an invocation owns key row j of KV head hk: k_j,
//     v_j, dK_j and dV_j in registers; the workgroup walks the query rows
//     of every head of the group that can see its keys, TILE rows of Q and
//     dO (with their log-sum-exp and D) at a time.
//
// Dot-product scores only (additive scores keep the row passes); storage
// buffers; d_k and d_v at most DMAX. Every invocation takes part in each
// tile's loads and barriers (uniform loop bounds); only live rows add.

#define BACKWARD 1
#define GRAD_ACCESS writeonly
#include "interface.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = BWD_SPEC_MASKED) const bool MASKED = true;
layout(constant_id = BWD_SPEC_Q_TYPE) const int Q_TYPE = 0;
layout(constant_id = BWD_SPEC_K_TYPE) const int K_TYPE = 0;
layout(constant_id = BWD_SPEC_V_TYPE) const int V_TYPE = 0;
layout(constant_id = BWD_SPEC_VARIANTS) const int VARIANTS = 0;
layout(constant_id = BWD_SPEC_DMAX) const int DMAX = 64; // compile-time bound of d_k and d_v
layout(constant_id = BWD_SPEC_TILE) const int TILE = 16; // rows of the other side staged at once
const bool PAGED = false;

#include "attention_common.glsl"

#include "attention_backward_common.glsl"

shared float aTile[TILE * DMAX]; // K rows (query pass) or Q rows (key pass)
shared float bTile[TILE * DMAX]; // V rows or dO rows
#ifdef KV_PASS
shared float lseTile[TILE];
shared float dTile[TILE];
#endif

void main() {
    beginItem(int(gl_WorkGroupID.z));
    H = P.split.w; // the call's query heads
    int group = P.heads.y;
    int wg = int(gl_WorkGroupSize.x);
    int lane = int(gl_LocalInvocationID.x);
    float scale = P.scaling.x;
    float own[DMAX];  // q_t, or k_j
    float other[DMAX]; // dO_t, or v_j
    float gradA[DMAX]; // dQ_t, or dK_j
#ifdef KV_PASS
    float gradB[DMAX]; // dV_j
    hk = int(gl_WorkGroupID.y);
    int first = int(gl_WorkGroupID.x) * wg;
    int j = first + lane;
    int jc = min(j, S - 1);
    bool live = j < keyLen; // keyLen <= S
    [[unroll]] for (int i = 0; i < DMAX; i++) {
        own[i] = AT_CLAMPED(Kt, K_TYPE, kBase(jc), i, DK);
        other[i] = AT_CLAMPED(Vt, V_TYPE, vBase(jc), i, DV);
        gradA[i] = 0.0;
        gradB[i] = 0.0;
    }
    // The query rows that can see a key of this block.
    int lastKey = min(first + wg - 1, S - 1);
    int rowBegin = 0, rowEnd = min(L, queryLen);
    if ((flags & FLAG_CAUSAL) != 0) {
        rowBegin = max(rowBegin, first - shift);
    }
    if ((VARIANTS & VAR_WINDOW) != 0) {
        if (P.window.x >= 0) {
            rowEnd = min(rowEnd, lastKey + P.window.x - posShift + 1);
        }
        if (P.window.y >= 0) {
            rowBegin = max(rowBegin, first - P.window.y - posShift);
        }
    }
    for (int g = 0; g < group; g++) {
        int h = hk * group + g;
        float slope = slopeOf(h);
        for (int t0 = rowBegin; t0 < rowEnd; t0 += TILE) {
            barrier();
            for (int i = lane; i < TILE * DMAX; i += wg) {
                int t = min(t0 + i / DMAX, L - 1);
                int c = i % DMAX;
                aTile[i] = AT_CLAMPED(Qt, Q_TYPE, qBase(h, t), c, DK);
                bTile[i] = c < DV ? dO[rowOf(h, t) * DV + c] : 0.0;
            }
            for (int i = lane; i < TILE; i += wg) {
                int r = rowOf(h, min(t0 + i, L - 1));
                lseTile[i] = t0 + i < rowEnd ? lseData[r] : NEG_INF;
                dTile[i] = rowD[r];
            }
            barrier();
            if (!live) {
                continue;
            }
            for (int u = 0; u < TILE; u++) {
                float lse = lseTile[u];
                if (lse == NEG_INF) {
                    continue; // past the rows, padded, or no visible key
                }
                float qk = 0.0;
                [[unroll]] for (int i = 0; i < DMAX; i++) {
                    qk += aTile[u * DMAX + i] * own[i];
                }
                float s = scoreOf(qk, t0 + u, h, slope, j, keyLen);
                float p = s == NEG_INF ? 0.0 : exp(s - lse);
                if (p == 0.0) {
                    continue;
                }
                float dp = 0.0;
                [[unroll]] for (int i = 0; i < DMAX; i++) {
                    dp += bTile[u * DMAX + i] * other[i];
                }
                float ds = p * (dp - dTile[u]) * capGrad(qk);
                float g2 = ds * scale;
                [[unroll]] for (int i = 0; i < DMAX; i++) {
                    gradB[i] += p * bTile[u * DMAX + i];
                    gradA[i] += g2 * aTile[u * DMAX + i];
                }
            }
        }
    }
    if (j < S) {
        int outK = ((b * (H / group) + hk) * S + j) * DK;
        int outV = ((b * (H / group) + hk) * S + j) * DV;
        [[unroll]] for (int i = 0; i < DMAX; i++) {
            if (i < DK) {
                dK[outK + i] = gradA[i];
            }
            if (i < DV) {
                dV[outV + i] = gradB[i];
            }
        }
    }
#else
    int h = int(gl_WorkGroupID.y);
    hk = h / group;
    int first = int(gl_WorkGroupID.x) * wg;
    int t = first + lane;
    int tc = min(t, L - 1);
    int r = rowOf(h, tc);
    float lse = lseData[r];
    bool live = t < L && tc < queryLen && lse != NEG_INF;
    float d = 0.0;
    int qb = qBase(h, tc), ob = oBase(h, tc);
    [[unroll]] for (int i = 0; i < DMAX; i++) {
        own[i] = AT_CLAMPED(Qt, Q_TYPE, qb, i, DK);
        other[i] = i < DV ? dO[r * DV + i] : 0.0;
        gradA[i] = 0.0;
        if (i < DV) {
            d += other[i] * oData[ob + min(i, DV - 1)];
        }
    }
    d = live ? d : 0.0;
    float sinkGrad = 0.0;
    if ((VARIANTS & VAR_SINKS) != 0 && live) {
        // dL/dsink = -P_sink D: the sink takes probability from the keys.
        sinkGrad = -exp(headData[2 * (P.window.w + h)] - lse) * d;
    }
    if (t < L) {
        rowD[r] = d;
        dSink[r] = sinkGrad;
    }
    float slope = slopeOf(h);
    int keyBegin = 0, keyEnd = keyLen;
    keyRange(first, min(first + wg - 1, L - 1), keyBegin, keyEnd);
    for (int j0 = keyBegin; j0 < keyEnd; j0 += TILE) {
        barrier();
        for (int i = lane; i < TILE * DMAX; i += wg) {
            int j = min(j0 + i / DMAX, S - 1);
            int c = i % DMAX;
            aTile[i] = AT_CLAMPED(Kt, K_TYPE, kBase(j), c, DK);
            bTile[i] = AT_CLAMPED(Vt, V_TYPE, vBase(j), c, DV);
        }
        barrier();
        if (!live) {
            continue;
        }
        for (int u = 0; u < TILE; u++) {
            float qk = 0.0;
            [[unroll]] for (int i = 0; i < DMAX; i++) {
                qk += own[i] * aTile[u * DMAX + i];
            }
            float s = scoreOf(qk, tc, h, slope, j0 + u, keyEnd);
            float p = s == NEG_INF ? 0.0 : exp(s - lse);
            if (p == 0.0) {
                continue;
            }
            float dp = 0.0;
            [[unroll]] for (int i = 0; i < DMAX; i++) {
                dp += other[i] * bTile[u * DMAX + i];
            }
            float g2 = p * (dp - d) * capGrad(qk) * scale;
            [[unroll]] for (int i = 0; i < DMAX; i++) {
                gradA[i] += g2 * aTile[u * DMAX + i];
            }
        }
    }
    if (t < L) {
        [[unroll]] for (int i = 0; i < DMAX; i++) {
            if (i < DK) {
                dQ[r * DK + i] = gradA[i];
            }
        }
    }
#endif
}
