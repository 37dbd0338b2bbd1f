#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
// The backward pass of scaled dot-product attention (SEMANTICS.md §10) as
// row kernels, for CPU drivers (lavapipe): the formulas and passes of
// attention_backward.comp, laid out as the forward's row kernel
// (attention.comp) is. Each invocation owns ROWS rows of its side in
// registers, interleaved over the workgroup's WG lanes; the lanes walk
// the other side's rows STEP at a time, every loop over them and over the
// head dimension unrolled, with no shared memory and no barriers.
//
//   query pass: an invocation owns query rows t of head h (q_t, dO_t,
//     dQ_t, D_t = dO_t . O_t, which it writes for the key pass, and the
//     row's share of its head's sink gradient, -P_sink D_t); a step reads
//     STEP keys' K and V rows.
//   key pass (KV_PASS): an invocation owns key rows j of KV head hk (k_j,
//     v_j, dK_j, dV_j); a step reads STEP query rows' Q and dO rows and
//     their log-sum-exp and D, over the query rows of every head of the
//     group that can see the workgroup's keys, in one loop (head by head).
//
// The lanes of a subgroup all read the same other-side rows: as the
// forward's SHARED_LOADS, each lane fetches every SHARE-th vec4 slot of a
// row and takes the rest from its neighbours by subgroupShuffle (texel
// fetches are calls with a per-lane gather on lavapipe). Q, K, V, dO, the
// log-sum-exp and (key pass) D are read through texel views, rows four
// elements a load (vec4 slots: widths, offsets and strides multiples of
// 4); the rest are storage buffers read or written outside the loop.
//
// Each output element is summed by one invocation in row order (no
// atomics): the gradients are the same bits run to run. The loop bounds
// are uniform over the workgroup; rows that must not add (masked, past
// the end, padded, with no visible key) add 0 by selection. An invocation
// loops once per step (per head of the group in the key pass), which the
// planner keeps within lavapipe's loop budget (pipelines/loops.go).

#define BACKWARD 1
#include "interface.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = SPEC_D4) const int D4 = 16;     // compile-time bound of d_k and d_v, in vec4s
layout(constant_id = SPEC_ROWS) const int ROWS = 2;  // own rows per invocation
layout(constant_id = SPEC_WG) const int WG = 8;      // = local_size_x; own rows interleave by it
layout(constant_id = SPEC_STEP) const int STEP = 4;  // other-side rows per loop iteration
layout(constant_id = SPEC_SHARE) const int SHARE = 8; // lanes sharing a row's loads
layout(constant_id = SPEC_MASKED) const int MASKED = 67; // FLAG_* bits of the masks the call has (attention_common.glsl)
layout(constant_id = SPEC_Q_TYPE) const int Q_TYPE = 0;
layout(constant_id = SPEC_K_TYPE) const int K_TYPE = 0;
layout(constant_id = SPEC_V_TYPE) const int V_TYPE = 0;
layout(constant_id = SPEC_VARIANTS) const int VARIANTS = 0;
const bool PAGED = false;

#include "attention_common.glsl"

#include "attention_inputs.glsl"
INPUT(BIND_DO, DOt) // dense float32 (B, H, L, d_v)
#define DOt_SCALES 0

#ifdef KV_PASS
layout(binding = BIND_ROWD) uniform samplerBuffer rowDt;
#endif

#define GRAD_T vec4 // dense gradient rows start at multiples of 4 elements (d_k, d_v and the offsets are)
#include "attention_backward_common.glsl"

#define LSE_AT(row) texelFetch(lseTexels, lseOffset() + (row)).r
#define DO_BASE(row) (dOOffset() + (row) * DV)

const int SLOTS = (D4 + SHARE - 1) / SHARE; // vec4 slots each lane fetches per row

// LOAD_SHARED fetches this lane's slots of the row at base: slot
// i_ * SHARE + lane, clamped (the clamped copies are never shuffled out).
#define LOAD_SHARED(own, buf, T, base, n)                                                         \
    [[unroll]] for (int i_ = 0; i_ < SLOTS; i_++) {                                              \
        own[i_] = LOAD4(buf, T, base, min(i_ * SHARE + int(gl_SubgroupInvocationID), D4 - 1), n); \
    }
// Slot c of a row loaded by LOAD_SHARED into own.
#define SLOT(own, c) subgroupShuffle(own[(c) / SHARE], (c) % SHARE)

// STEP_DOTS declares qk and dp and sums into them, for step row u and own
// row r at u * ROWS + r, the dot products of the step row's slots (aOwn[u]
// and bOwn[u], fetched by LOAD_SHARED) with the own row's (ownA, ownB):
// q_t . k_j and dO_t . v_j, in either pass (the products commute exactly,
// so the sums are the same bits whichever side a row is on).
#define STEP_DOTS(qk, dp, aOwn, bOwn)                                  \
    float qk[STEP * ROWS], dp[STEP * ROWS];                            \
    [[unroll]] for (int i_ = 0; i_ < STEP * ROWS; i_++) {              \
        qk[i_] = 0.0;                                                  \
        dp[i_] = 0.0;                                                  \
    }                                                                  \
    [[unroll]] for (int c_ = 0; c_ < D4; c_++) {                       \
        [[unroll]] for (int u_ = 0; u_ < STEP; u_++) {                 \
            vec4 a_ = SLOT(aOwn[u_], c_), o_ = SLOT(bOwn[u_], c_);     \
            [[unroll]] for (int r_ = 0; r_ < ROWS; r_++) {             \
                qk[u_ * ROWS + r_] += dot(ownA[r_ * D4 + c_], a_);     \
                dp[u_ * ROWS + r_] += dot(ownB[r_ * D4 + c_], o_);     \
            }                                                          \
        }                                                              \
    }

vec4 ownA[ROWS * D4];  // q_t, or k_j
vec4 ownB[ROWS * D4];  // dO_t, or v_j
vec4 gradA[ROWS * D4]; // dQ_t, or dK_j
#ifdef KV_PASS
vec4 gradB[ROWS * D4]; // dV_j
#endif

void main() {
    beginBackward();
    int lane = int(gl_LocalInvocationID.x);
    float scale = scoreScale();
    int first = int(gl_WorkGroupID.x) * ROWS * WG; // the workgroup's first own row
    int own[ROWS];                                 // each own row's index, clamped into range
#ifdef KV_PASS
    hk = int(gl_WorkGroupID.y);
    bool keyOK[ROWS];
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        int j = first + r * WG + lane;
        keyOK[r] = j < keyLen; // keyLen <= S
        own[r] = min(j, S - 1);
        int kb = kBase(own[r]), vb = vBase(own[r]);
        [[unroll]] for (int c = 0; c < D4; c++) {
            ownA[r * D4 + c] = LOAD4(Kt, K_TYPE, kb, c, DK);
            ownB[r * D4 + c] = LOAD4(Vt, V_TYPE, vb, c, DV);
            gradA[r * D4 + c] = vec4(0.0);
            gradB[r * D4 + c] = vec4(0.0);
        }
    }
    // The query rows that can see a key of this block.
    int rowBegin, rowEnd;
    queryRange(first, min(first + ROWS * WG - 1, S - 1), rowBegin, rowEnd);
    // One loop over (head of the group, step of rows): the steps of each
    // head, head after head.
    int steps = rowEnd > rowBegin ? (rowEnd - rowBegin + STEP - 1) / STEP : 0;
    int g = 0, t0 = rowBegin;
    int h = hk * group;
    float slope = slopeOf(h);
    for (int n = 0; n < steps * group; n++) {
        float lse[STEP], dRow[STEP];
        int tc[STEP];
        vec4 aOwn[STEP][SLOTS], bOwn[STEP][SLOTS]; // this lane's slots of q_t and dO_t
        [[unroll]] for (int u = 0; u < STEP; u++) {
            int t = t0 + u;
            tc[u] = min(t, L - 1);
            int rr = rowOf(h, tc[u]);
            lse[u] = LSE_AT(rr);
            lse[u] = t < rowEnd ? lse[u] : NEG_INF; // past the rows: adds nothing
            dRow[u] = texelFetch(rowDt, lseOffset() + rr).r;
            int qb = qBase(h, tc[u]), ob = DO_BASE(rr);
            LOAD_SHARED(aOwn[u], Qt, Q_TYPE, qb, DK)
            LOAD_SHARED(bOwn[u], DOt, TYPE_F32, ob, DV)
        }
        STEP_DOTS(qk, dp, aOwn, bOwn)
        // p and dS * scale per (row, key), 0 where the pair does not count
        // (a row with no visible key has lse = -inf and D = 0).
        float p[STEP * ROWS], ds[STEP * ROWS];
        [[unroll]] for (int u = 0; u < STEP; u++) {
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                int i = u * ROWS + r;
                float s = scoreOf(qk[i], tc[u], h, slope, own[r], keyLen);
                bool counts = keyOK[r] && lse[u] != NEG_INF;
                p[i] = counts ? probOf(s, lse[u]) : 0.0;
                ds[i] = p[i] * (dp[i] - dRow[u]) * capGrad(qk[i]) * scale;
            }
        }
        [[unroll]] for (int c = 0; c < D4; c++) {
            vec4 a[STEP], o[STEP];
            [[unroll]] for (int u = 0; u < STEP; u++) {
                a[u] = SLOT(aOwn[u], c);
                o[u] = SLOT(bOwn[u], c);
            }
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                vec4 sumA = gradA[r * D4 + c], sumB = gradB[r * D4 + c];
                [[unroll]] for (int u = 0; u < STEP; u++) {
                    sumA += ds[u * ROWS + r] * a[u];
                    sumB += p[u * ROWS + r] * o[u];
                }
                gradA[r * D4 + c] = sumA;
                gradB[r * D4 + c] = sumB;
            }
        }
        t0 += STEP;
        if (t0 >= rowEnd) { // the next head of the group
            t0 = rowBegin;
            g++;
            h = hk * group + min(g, group - 1);
            slope = slopeOf(h);
        }
    }
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        int j = first + r * WG + lane;
        if (j < S) {
            int outK = (dKOffset() + kvRowOf(j) * DK) >> 2;
            int outV = (dVOffset() + kvRowOf(j) * DV) >> 2;
            [[unroll]] for (int c = 0; c < D4; c++) {
                if (4 * c < DK) {
                    dK[outK + c] = gradA[r * D4 + c];
                }
                if (4 * c < DV) {
                    dV[outV + c] = gradB[r * D4 + c];
                }
            }
        }
    }
#else
    int h = int(gl_WorkGroupID.y);
    hk = h / group;
    float lse[ROWS], dRow[ROWS];
    bool live[ROWS];
    float slope = slopeOf(h);
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        int t = first + r * WG + lane;
        own[r] = min(t, L - 1);
        int rr = rowOf(h, own[r]);
        lse[r] = LSE_AT(rr);
        live[r] = t < L && own[r] < queryLen && lse[r] != NEG_INF;
        int qb = qBase(h, own[r]), ob = oBase(h, own[r]);
        float d = 0.0;
        [[unroll]] for (int c = 0; c < D4; c++) {
            ownA[r * D4 + c] = LOAD4(Qt, Q_TYPE, qb, c, DK);
            ownB[r * D4 + c] = LOAD4(DOt, TYPE_F32, DO_BASE(rr), c, DV);
            gradA[r * D4 + c] = vec4(0.0);
            [[unroll]] for (int e = 0; e < 4; e++) {
                if (4 * c + e < DV) {
                    d += ownB[r * D4 + c][e] * oData[ob + 4 * c + e];
                }
            }
        }
        dRow[r] = live[r] ? d : 0.0;
        if (t < L) {
            rowD[lseOffset() + rr] = dRow[r];
            dSink[lseOffset() + rr] = sinkShare(live[r], h, lse[r], dRow[r]);
        }
    }
    int keyBegin = 0, keyEnd = keyLen;
    keyRange(first, min(first + ROWS * WG, L) - 1, keyBegin, keyEnd);
    for (int j0 = keyBegin; j0 < keyEnd; j0 += STEP) {
        vec4 aOwn[STEP][SLOTS], bOwn[STEP][SLOTS]; // this lane's slots of k_j and v_j
        [[unroll]] for (int u = 0; u < STEP; u++) {
            int j = min(j0 + u, S - 1);
            LOAD_SHARED(aOwn[u], Kt, K_TYPE, kBase(j), DK)
            LOAD_SHARED(bOwn[u], Vt, V_TYPE, vBase(j), DV)
        }
        STEP_DOTS(qk, dp, aOwn, bOwn)
        float ds[STEP * ROWS];
        [[unroll]] for (int u = 0; u < STEP; u++) {
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                int i = u * ROWS + r;
                float s = scoreOf(qk[i], own[r], h, slope, j0 + u, keyEnd);
                float p = live[r] ? probOf(s, lse[r]) : 0.0;
                ds[i] = p * (dp[i] - dRow[r]) * capGrad(qk[i]) * scale;
            }
        }
        [[unroll]] for (int c = 0; c < D4; c++) {
            vec4 a[STEP];
            [[unroll]] for (int u = 0; u < STEP; u++) {
                a[u] = SLOT(aOwn[u], c);
            }
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                vec4 sum = gradA[r * D4 + c];
                [[unroll]] for (int u = 0; u < STEP; u++) {
                    sum += ds[u * ROWS + r] * a[u];
                }
                gradA[r * D4 + c] = sum;
            }
        }
    }
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        int t = first + r * WG + lane;
        if (t < L) {
            int outQ = (dQOffset() + rowOf(h, own[r]) * DK) >> 2;
            [[unroll]] for (int c = 0; c < D4; c++) {
                if (4 * c < DK) {
                    dQ[outQ + c] = gradA[r * D4 + c];
                }
            }
        }
    }
#endif
}
