#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// Fused scaled dot-product attention forward for GPUs, workgroup-tiled
// (FlashAttention-2's loop order): a workgroup owns BR query rows of one
// KV head of one batch item - the rows of all query heads that share the
// KV head, packed (GQA), so a K/V tile serves every one of them - and
// walks the keys BC at a time. Each tile of K and V is staged in shared
// memory by the whole workgroup (consecutive lanes load consecutive vec4s
// of a row: coalesced along d), then each row updates its online-softmax
// state once per tile.
//
// LPR lanes share a row and split the head dimension: lane `part` holds
// vec4 slots part, part + LPR, ... of q and of the output accumulator, so
// a lane keeps 8 * D4 / LPR floats of them instead of 8 * D4, and the
// LPR partial dot products of a key are summed by a butterfly of
// subgroupShuffleXor. The lanes of a row are consecutive lanes of one
// subgroup; rows are numbered from gl_SubgroupID and
// gl_SubgroupInvocationID, so this holds for any subgroup size that LPR
// divides, with full subgroups (the planner requires both through
// VK_EXT_subgroup_size_control). Shared-memory reads need no padding: at
// a given key every lane of a subgroup reads the same tile row, the LPR
// lanes of a row consecutive vec4s of it (distinct banks), the other rows
// the same ones (a broadcast).
//
// Every option of attention.comp: masks, lengths, causal alignments,
// score variants, paged K/V, LSE, weights (a second pass), half inputs,
// chunked calls (the same Params block). Storage buffers only (the GPU
// path). SPLIT_K: flash-decoding, a workgroup per block of P.split.y keys
// (x) and row block of a KV head (y), writing the same partial results as
// attention.comp's split-K for attention_combine.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int D4 = 16;  // compile-time bound of d_k and d_v, in vec4s
layout(constant_id = 2) const int BR = 16;  // query rows per workgroup
layout(constant_id = 3) const int BC = 16;  // keys per tile
layout(constant_id = 4) const int LPR = 8;  // lanes per row; divides D4 and the subgroup size
layout(constant_id = 5) const bool MASKED = true;
layout(constant_id = 6) const int Q_TYPE = 0;
layout(constant_id = 7) const int K_TYPE = 0;
layout(constant_id = 8) const int V_TYPE = 0;
layout(constant_id = 9) const int VARIANTS = 0;
layout(constant_id = 10) const bool PAGED = false;

const int WG = BR * LPR;     // = local_size_x
const int SLOTS = D4 / LPR;  // vec4 slots of q and acc per lane

#include "attention_common.glsl"

#include "loads.glsl"
INPUT(1, Qt)
INPUT(2, Kt)
INPUT(3, Vt)

shared vec4 kTile[BC * D4];
shared vec4 vTile[BC * D4];

vec4 q[SLOTS];   // this lane's slots of its query row, as stored
vec4 acc[SLOTS]; // this lane's slots of the unnormalised output row
float sc[BC];    // the row's scores of the current tile

int part;   // this lane's share of the row: slots part + u * LPR
int row;    // query position of the lane's row (clamped into range)
int head;   // its query head
bool rowOK; // the row exists (within the packed rows)
float slope;

// loadTiles stages keys [j0, j0 + BC) of K (and of V if withV) in shared
// memory; keys past S are clamped (their scores are masked).
void loadTiles(int j0, bool withV) {
    int lane = int(gl_LocalInvocationID.x);
    for (int i = lane; i < BC * D4; i += WG) {
        int t = i / D4;
        int c = i % D4;
        int j = min(j0 + t, S - 1);
        kTile[i] = LOAD4(Kt, K_TYPE, P.offsets.y + hk * P.kStride.y + keyRow(P.kStride, j), c, DK);
        if (withV) {
            vTile[i] = LOAD4(Vt, V_TYPE, P.offsets.z + hk * P.vStride.y + keyRow(P.vStride, j), c, DV);
        }
    }
}

// tileScores fills sc with the row's scores of the staged keys from j0.
void tileScores(int j0, int keyEnd) {
    [[unroll]] for (int t = 0; t < BC; t++) {
        float x = 0.0;
        [[unroll]] for (int u = 0; u < SLOTS; u++) {
            x += dot(q[u], kTile[t * D4 + u * LPR + part]);
        }
        // Every lane of the row ends with the whole sum (in the same order
        // on each: equal dot products stay equal, SEMANTICS.md §7).
        [[unroll]] for (int o = 1; o < LPR; o *= 2) {
            x += subgroupShuffleXor(x, o);
        }
        sc[t] = scoreOf(x, row, head, slope, j0 + t, keyEnd);
    }
}

void main() {
    beginItem(int(gl_WorkGroupID.z));
    int group = P.heads.y;
    int packed = group * L; // rows of all query heads of this KV head
#ifdef SPLIT_K
    int rowBlocks = P.split.z;
    hk = int(gl_WorkGroupID.y) / rowBlocks;
    int rowBase = (int(gl_WorkGroupID.y) % rowBlocks) * BR;
    int H = P.split.w;
#else
    hk = int(gl_WorkGroupID.y);
    int rowBase = int(gl_WorkGroupID.x) * BR;
    int H = int(gl_NumWorkGroups.y) * group;
#endif
    int sgRows = int(gl_SubgroupSize) / LPR;
    int lane = int(gl_SubgroupInvocationID);
    int rho = rowBase + int(gl_SubgroupID) * sgRows + lane / LPR;
    part = lane % LPR;
    rowOK = rho < packed;
    rho = min(rho, packed - 1);
    row = rho % L;
    head = hk * group + rho / L;
    slope = slopeOf(head);

    // Keys some row of the block can see; the bounds are the workgroup's
    // (uniform control flow around the barriers and shuffles).
    int last = min(rowBase + BR, packed) - 1;
    bool oneHead = rowBase / L == last / L;
    int keyBegin = 0;
    int keyEnd = keyLen;
#ifdef SPLIT_K
    int split = int(gl_WorkGroupID.x);
    keyBegin = split * P.split.y;
    keyEnd = min(keyBegin + P.split.y, keyLen);
#endif
    keyRange(oneHead ? rowBase % L : 0, oneHead ? last % L : L - 1, keyBegin, keyEnd);

    int qBase = P.offsets.x + b * P.qStride.x + head * P.qStride.y + row * P.qStride.z;
    [[unroll]] for (int u = 0; u < SLOTS; u++) {
        q[u] = LOAD4(Qt, Q_TYPE, qBase, u * LPR + part, DK);
        acc[u] = vec4(0.0);
    }
    float m = NEG_INF;
    float l = 0.0;
    for (int j0 = keyBegin; j0 < keyEnd; j0 += BC) {
        barrier(); // the previous tile is no longer read
        loadTiles(j0, true);
        barrier();
        tileScores(j0, keyEnd);
        float mNew = m;
        [[unroll]] for (int t = 0; t < BC; t++) {
            mNew = max(mNew, sc[t]);
        }
        // While every key so far is masked mNew is -inf: keep alpha 1
        // (never exp2(-inf - -inf)); acc and l are still zero then.
        float alpha = mNew == NEG_INF ? 1.0 : exp2((m - mNew) * LOG2E);
        m = mNew;
        l *= alpha;
        [[unroll]] for (int u = 0; u < SLOTS; u++) {
            acc[u] *= alpha; // once per tile
        }
        [[unroll]] for (int t = 0; t < BC; t++) {
            float p = sc[t] == NEG_INF ? 0.0 : exp2((sc[t] - mNew) * LOG2E);
            l += p;
            [[unroll]] for (int u = 0; u < SLOTS; u++) {
                acc[u] += p * vTile[t * D4 + u * LPR + part];
            }
        }
    }

#ifdef SPLIT_K
    // Partial results: max (natural units), sum, unnormalised output row.
    if (rowOK) {
        bool live = row < queryLen && l > 0.0;
        int base = (((b * H + head) * L + row) * P.split.x + split) * (DV + 2);
        if (part == 0) {
            wData[base] = live ? m : NEG_INF;
            wData[base + 1] = live ? l : 0.0;
        }
        [[unroll]] for (int u = 0; u < SLOTS; u++) {
            int c = u * LPR + part;
            [[unroll]] for (int t = 0; t < 4; t++) {
                if (4 * c + t < DV) {
                    wData[base + 2 + 4 * c + t] = live ? acc[u][t] : 0.0;
                }
            }
        }
    }
#else
    float inv = endRow(m, l, head, P.outs.w + row >= queryLen);
    if (rowOK) {
        int oBase = P.offsets.w + b * P.oStride.x + head * P.oStride.y + row * P.oStride.z;
        [[unroll]] for (int u = 0; u < SLOTS; u++) {
            int c = u * LPR + part;
            vec4 o = acc[u] * inv;
            [[unroll]] for (int t = 0; t < 4; t++) {
                if (4 * c + t < DV) {
                    oData[oBase + 4 * c + t] = o[t];
                }
            }
        }
        if ((flags & FLAG_LSE) != 0 && part == 0) {
            lseData[P.outs.x + (b * H + head) * P.outs.z + row] = lseOf(m, l);
        }
    }

    if ((flags & FLAG_WEIGHTS) != 0) {
        // Second pass for the optional (B,H,L,S) weights: recompute each
        // tile's scores and normalise with the final max and sum; the lanes
        // of a row write alternate keys.
        for (int j0 = 0; j0 < S; j0 += BC) {
            barrier();
            loadTiles(j0, false);
            barrier();
            tileScores(j0, keyLen);
            [[unroll]] for (int t = 0; t < BC; t++) {
                int j = j0 + t;
                if (rowOK && t % LPR == part && j < S) {
                    float e = sc[t];
                    wData[P.outs.y + ((b * H + head) * P.outs.z + row) * S + j] = (l > 0.0 && e != NEG_INF) ? exp2((e - m) * LOG2E) / l : 0.0;
                }
            }
        }
    }
#endif
}
