#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// The backward pass of scaled dot-product attention (SEMANTICS.md §10),
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
// Workgroup-tiled as FlashAttention-2's backward: an invocation owns one
// output row and holds it and its gradient in registers (arrays of DMAX,
// indexed only by unrolled loops), and the workgroup stages the other
// side's rows in shared memory a tile at a time, so every row read from
// memory serves WG invocations:
//
//   query pass: an invocation owns query row t of head h: q_t, dO_t and
//     dQ_t; the workgroup walks the keys its rows can see, TILE rows of K
//     and V at a time, and writes D_t and the row's share of its head's
//     sink gradient, -P_sink D, which the key pass and the host read.
//   key pass (KV_PASS): an invocation owns key row j of KV head hk: k_j,
//     v_j, dK_j and dV_j; the workgroup walks the query rows of every head
//     of the group that can see its keys, TILE rows of Q and dO (with
//     their log-sum-exp and D) at a time.
//
// Each invocation sums in a fixed order (no atomics): the results are the
// same bits run to run. Every invocation takes part in each tile's loads
// and barriers (uniform loop bounds); only live rows add. The inner loops
// and the tiles' loads are unrolled: lavapipe stops an invocation's loops
// after 65,535 iterations in all (per-element loops inside the key loop
// reached that at a few hundred keys), so an invocation loops about once
// per key (query pass) or per query row of its group (key pass), and the
// planner refuses on lavapipe what would loop more. Inputs are read as loads.glsl reads them, in any
// element type; gradients are float32, dense, at their windows' offsets
// (a call larger than one binding runs as chunks of KV heads).

#define BACKWARD 1
#include "interface.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = SPEC_MASKED) const int MASKED = 67; // FLAG_* bits of the masks read: all where the call has any (attention_common.glsl)
layout(constant_id = SPEC_Q_TYPE) const int Q_TYPE = 0;
layout(constant_id = SPEC_K_TYPE) const int K_TYPE = 0;
layout(constant_id = SPEC_V_TYPE) const int V_TYPE = 0;
layout(constant_id = SPEC_VARIANTS) const int VARIANTS = 0;
layout(constant_id = SPEC_DMAX) const int DMAX = 64; // compile-time bound of d_k and d_v
layout(constant_id = SPEC_TILE) const int TILE = 16; // rows of the other side staged at once
const bool PAGED = false;

#include "attention_common.glsl"

#include "attention_inputs.glsl"

layout(std430, binding = BIND_DO) readonly buffer DOBuf { float dO[]; };
#ifdef ADDITIVE
layout(std430, binding = BIND_WA) readonly buffer WaBuf { float waData[]; };
#ifdef KV_PASS
layout(std430, binding = BIND_DWA) writeonly buffer DWaBuf { float dWa[]; };
#endif
#endif
#ifdef KV_PASS
layout(std430, binding = BIND_ROWD) readonly buffer RowDBuf { float rowD[]; };
#endif

#define GRAD_T float
#include "attention_backward_common.glsl"

#define LSE_AT(r) lseData[lseOffset() + (r)]
#define ROWD_AT(r) rowD[lseOffset() + (r)]
#define DSINK_AT(r) dSink[lseOffset() + (r)]
#define DO_AT(r, i) dO[dOOffset() + (r) * DV + (i)]
#define DQ_AT(r, i) dQ[dQOffset() + (r) * DK + (i)]

// SCORE_TERM is element i's term of the raw score of q and k (q . k, or
// w_a . tanh(q + k)), given the staged row's element a and the own o.
#ifdef ADDITIVE
#define SCORE_TERM(a, o, i) (wa[i] * tanh((a) + (o)))
#else
#define SCORE_TERM(a, o, i) ((a) * (o))
#endif

// Each invocation's share of a tile's loads, unrolled (see above: loops
// are what lavapipe counts). TILE <= WG.
const int WG = int(gl_WorkGroupSize.x);
const int LOADS = (TILE * DMAX + WG - 1) / WG;

shared float aTile[TILE * DMAX]; // K rows (query pass) or Q rows (key pass)
shared float bTile[TILE * DMAX]; // V rows or dO rows
#ifdef KV_PASS
shared float lseTile[TILE];
shared float dTile[TILE];
#endif

void main() {
    beginBackward();
    int lane = int(gl_LocalInvocationID.x);
    float scale = scoreScale();
    float own[DMAX];  // q_t, or k_j
    float other[DMAX]; // dO_t, or v_j
    float gradA[DMAX]; // dQ_t, or dK_j
#ifdef ADDITIVE
    float wa[DMAX];
    [[unroll]] for (int i = 0; i < DMAX; i++) {
        wa[i] = i < DK ? waData[i] : 0.0;
    }
#endif
#ifdef KV_PASS
    float gradB[DMAX]; // dV_j
#ifdef ADDITIVE
    float gradW[DMAX]; // this key row's share of dw_a
    [[unroll]] for (int i = 0; i < DMAX; i++) {
        gradW[i] = 0.0;
    }
#endif
    hk = int(gl_WorkGroupID.y);
    int first = int(gl_WorkGroupID.x) * WG;
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
    int rowBegin, rowEnd;
    queryRange(first, min(first + WG - 1, S - 1), rowBegin, rowEnd);
    for (int g = 0; g < group; g++) {
        int h = hk * group + g;
        float slope = slopeOf(h);
        for (int t0 = rowBegin; t0 < rowEnd; t0 += TILE) {
            barrier();
            [[unroll]] for (int n = 0; n < LOADS; n++) {
                int i = lane + n * WG;
                if (i < TILE * DMAX) {
                    int t = min(t0 + i / DMAX, L - 1);
                    int c = i % DMAX;
                    aTile[i] = AT_CLAMPED(Qt, Q_TYPE, qBase(h, t), c, DK);
                    bTile[i] = c < DV ? DO_AT(rowOf(h, t), c) : 0.0;
                }
            }
            if (lane < TILE) {
                int r = rowOf(h, min(t0 + lane, L - 1));
                lseTile[lane] = t0 + lane < rowEnd ? LSE_AT(r) : NEG_INF;
                dTile[lane] = ROWD_AT(r);
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
                    qk += SCORE_TERM(aTile[u * DMAX + i], own[i], i);
                }
                float s = scoreOf(qk, t0 + u, h, slope, j, keyLen);
                float p = probOf(s, lse);
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
#ifdef ADDITIVE
                    float th = tanh(aTile[u * DMAX + i] + own[i]);
                    gradA[i] += ds * (wa[i] * (1.0 - th * th));
                    gradW[i] += ds * th;
#else
                    gradA[i] += g2 * aTile[u * DMAX + i];
#endif
                }
            }
        }
    }
    if (j < S) {
        int outK = dKOffset() + kvRowOf(j) * DK;
        int outV = dVOffset() + kvRowOf(j) * DV;
        [[unroll]] for (int i = 0; i < DMAX; i++) {
            if (i < DK) {
                dK[outK + i] = gradA[i];
            }
            if (i < DV) {
                dV[outV + i] = gradB[i];
            }
#ifdef ADDITIVE
            if (i < DK) {
                dWa[outK + i] = gradW[i];
            }
#endif
        }
    }
#else
    int h = int(gl_WorkGroupID.y);
    hk = h / group;
    int first = int(gl_WorkGroupID.x) * WG;
    int t = first + lane;
    int tc = min(t, L - 1);
    int r = rowOf(h, tc);
    float lse = LSE_AT(r);
    bool live = t < L && tc < queryLen && lse != NEG_INF;
    float d = 0.0;
    int qb = qBase(h, tc), ob = oBase(h, tc);
    [[unroll]] for (int i = 0; i < DMAX; i++) {
        own[i] = AT_CLAMPED(Qt, Q_TYPE, qb, i, DK);
        other[i] = i < DV ? DO_AT(r, i) : 0.0;
        gradA[i] = 0.0;
        if (i < DV) {
            d += other[i] * oData[ob + min(i, DV - 1)];
        }
    }
    d = live ? d : 0.0;
    if (t < L) {
        ROWD_AT(r) = d;
        DSINK_AT(r) = sinkShare(live, h, lse, d);
    }
    float slope = slopeOf(h);
    int keyBegin = 0, keyEnd = keyLen;
    keyRange(first, min(first + WG - 1, L - 1), keyBegin, keyEnd);
    for (int j0 = keyBegin; j0 < keyEnd; j0 += TILE) {
        barrier();
        [[unroll]] for (int n = 0; n < LOADS; n++) {
            int i = lane + n * WG;
            if (i < TILE * DMAX) {
                int j = min(j0 + i / DMAX, S - 1);
                int c = i % DMAX;
                aTile[i] = AT_CLAMPED(Kt, K_TYPE, kBase(j), c, DK);
                bTile[i] = AT_CLAMPED(Vt, V_TYPE, vBase(j), c, DV);
            }
        }
        barrier();
        if (!live) {
            continue;
        }
        for (int u = 0; u < TILE; u++) {
            float qk = 0.0;
            [[unroll]] for (int i = 0; i < DMAX; i++) {
                qk += SCORE_TERM(aTile[u * DMAX + i], own[i], i);
            }
            float s = scoreOf(qk, tc, h, slope, j0 + u, keyEnd);
            float p = probOf(s, lse);
            if (p == 0.0) {
                continue;
            }
            float dp = 0.0;
            [[unroll]] for (int i = 0; i < DMAX; i++) {
                dp += other[i] * bTile[u * DMAX + i];
            }
            float ds = p * (dp - d) * capGrad(qk);
            float g2 = ds * scale;
            [[unroll]] for (int i = 0; i < DMAX; i++) {
#ifdef ADDITIVE
                float th = tanh(aTile[u * DMAX + i] + own[i]);
                gradA[i] += ds * (wa[i] * (1.0 - th * th));
#else
                gradA[i] += g2 * aTile[u * DMAX + i];
#endif
            }
        }
    }
    if (t < L) {
        [[unroll]] for (int i = 0; i < DMAX; i++) {
            if (i < DK) {
                DQ_AT(r, i) = gradA[i];
            }
        }
    }
#endif
}
