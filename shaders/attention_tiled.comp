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
// LPR lanes share RPL rows and split the head dimension: lane `part` holds
// vec4 slots part, part + LPR, ... of each row's q (D4 of them) and output
// accumulator (DV4), so a lane keeps 4 * RPL * (D4 + DV4) / LPR floats of
// them, and the LPR partial dot products of a key are summed by a
// butterfly of subgroupShuffleXor. DV4 is d_v's own bound where it is
// smaller (multi-head latent attention: d_k 576, d_v 512); V_IN_K: V is
// the leading d_v columns of K's rows (MLA's latent), so only K is staged
// and V's slots are read from K's tile.
// Each K and V slot read from shared memory serves the lane's RPL rows
// (register reuse: fewer shared-memory reads per multiply-add). The lanes of a row are consecutive lanes of one
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
// path). SPLIT_K: flash-decoding, a workgroup per block of splitKeys() keys
// (x) and row block of a KV head (y), writing the same partial results as
// attention.comp's split-K for attention_combine.comp.

#include "interface.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = SPEC_D4) const int D4 = 16;  // compile-time bound of d_k and d_v, in vec4s
layout(constant_id = SPEC_BR) const int BR = 16;  // query rows per workgroup
layout(constant_id = SPEC_BC) const int BC = 16;  // keys per tile
layout(constant_id = SPEC_LPR) const int LPR = 8;  // lanes per row; divides D4 and the subgroup size
layout(constant_id = SPEC_MASKED) const int MASKED = 67; // FLAG_* bits of the masks read: all where the call has any (attention_common.glsl)
layout(constant_id = SPEC_Q_TYPE) const int Q_TYPE = 0;
layout(constant_id = SPEC_K_TYPE) const int K_TYPE = 0;
layout(constant_id = SPEC_V_TYPE) const int V_TYPE = 0;
layout(constant_id = SPEC_VARIANTS) const int VARIANTS = 0;
layout(constant_id = SPEC_PAGED) const bool PAGED = false;
layout(constant_id = SPEC_RPL) const int RPL = 1; // query rows per lane group; divides BR
layout(constant_id = SPEC_DV4) const int DV4 = 16; // compile-time bound of d_v, in vec4s; LPR divides it, at most D4
layout(constant_id = SPEC_V_IN_K) const bool V_IN_K = false;

const int GROUPS = BR / RPL;    // lane groups of LPR lanes
const int WG = GROUPS * LPR;    // = local_size_x
const int SLOTS = D4 / LPR;     // vec4 slots of q per lane and row
const int VSLOTS = DV4 / LPR;   // vec4 slots of acc per lane and row
const int VTILE = V_IN_K ? 1 : BC * DV4; // V's own tile (unused with V_IN_K)

#include "attention_forward.glsl"

#include "attention_inputs.glsl"

shared vec4 kTile[BC * D4];
shared vec4 vTile[VTILE];

vec4 q[RPL * SLOTS];    // this lane's slots of its query rows, as stored
vec4 acc[RPL * VSLOTS]; // this lane's slots of the unnormalised output rows
float sc[RPL * BC];    // the rows' scores of the current tile

int part;        // this lane's share of a row: slots part + u * LPR
int row[RPL];    // query position of each of the lane's rows (clamped into range)
int head[RPL];   // its query head
bool rowOK[RPL]; // the row exists (within the packed rows)
float slope[RPL];

// loadTiles stages keys [j0, j0 + BC) of K (and of V if withV, unless
// V_IN_K) in shared memory; keys past S are clamped (their scores are
// masked).
void loadTiles(int j0, bool withV) {
    int lane = int(gl_LocalInvocationID.x);
    for (int i = lane; i < BC * D4; i += WG) {
        int t = i / D4;
        int c = i % D4;
        int j = min(j0 + t, S - 1);
        kTile[i] = LOAD4(Kt, K_TYPE, kOffset() + hk * P.kStride.y + keyRow(P.kStride, j), c, DK);
        if (withV && !V_IN_K && c < DV4) {
            vTile[t * DV4 + c] = LOAD4(Vt, V_TYPE, vOffset() + hk * P.vStride.y + keyRow(P.vStride, j), c, DV);
        }
    }
}

// vSlot is slot c of staged key t's value row: from K's tile with V_IN_K
// (its slots past d_v hold K's columns, which no store reads back).
vec4 vSlot(int t, int c) {
    return V_IN_K ? kTile[t * D4 + c] : vTile[t * DV4 + c];
}

// tileScores fills sc with the rows' scores of the staged keys from j0.
void tileScores(int j0, int keyEnd) {
    [[unroll]] for (int t = 0; t < BC; t++) {
        vec4 k[SLOTS];
        [[unroll]] for (int u = 0; u < SLOTS; u++) {
            k[u] = kTile[t * D4 + u * LPR + part];
        }
        [[unroll]] for (int r = 0; r < RPL; r++) {
            float x = 0.0;
            [[unroll]] for (int u = 0; u < SLOTS; u++) {
                x += dot(q[r * SLOTS + u], k[u]);
            }
            // Every lane of the row ends with the whole sum (in the same
            // order on each: equal dot products stay equal, SEMANTICS.md §8).
            [[unroll]] for (int o = 1; o < LPR; o *= 2) {
                x += subgroupShuffleXor(x, o);
            }
            sc[r * BC + t] = scoreOf(x, row[r], head[r], slope[r], j0 + t, keyEnd);
        }
    }
}

void main() {
    int rowBase = initIndices(BR, false);
    // Lane group g of the workgroup holds rows g, g + GROUPS, ... of the block.
    int sgGroups = int(gl_SubgroupSize) / LPR;
    int lane = int(gl_SubgroupInvocationID);
    int g = int(gl_SubgroupID) * sgGroups + lane / LPR;
    part = lane % LPR;
    [[unroll]] for (int r = 0; r < RPL; r++) {
        rowOK[r] = packedRow(rowBase + r * GROUPS + g, row[r], head[r]);
        slope[r] = slopeOf(head[r]);
    }

    // Keys some row of the block can see; the bounds are the workgroup's
    // (uniform control flow around the barriers and shuffles).
    int keyBegin = 0;
    int keyEnd = keyLen;
#ifdef SPLIT_K
    int split = int(gl_WorkGroupID.x);
    keyBegin = split * splitKeys();
    keyEnd = min(keyBegin + splitKeys(), keyLen);
#endif
    packedKeyRange(rowBase, BR, keyBegin, keyEnd);

    [[unroll]] for (int r = 0; r < RPL; r++) {
        int qBase = qOffset() + b * P.qStride.x + head[r] * P.qStride.y + row[r] * P.qStride.z;
        [[unroll]] for (int u = 0; u < SLOTS; u++) {
            q[r * SLOTS + u] = LOAD4(Qt, Q_TYPE, qBase, u * LPR + part, DK);
        }
        [[unroll]] for (int u = 0; u < VSLOTS; u++) {
            acc[r * VSLOTS + u] = vec4(0.0);
        }
    }
    float m[RPL];
    float l[RPL];
    [[unroll]] for (int r = 0; r < RPL; r++) {
        m[r] = NEG_INF;
        l[r] = 0.0;
    }
    for (int j0 = keyBegin; j0 < keyEnd; j0 += BC) {
        barrier(); // the previous tile is no longer read
        loadTiles(j0, true);
        barrier();
        tileScores(j0, keyEnd);
        [[unroll]] for (int r = 0; r < RPL; r++) {
            float alpha;
            ONLINE_SOFTMAX(t, BC, sc[r * BC + t], m[r], l[r], alpha)
            [[unroll]] for (int u = 0; u < VSLOTS; u++) {
                acc[r * VSLOTS + u] *= alpha; // once per tile
            }
        }
        [[unroll]] for (int t = 0; t < BC; t++) {
            [[unroll]] for (int u = 0; u < VSLOTS; u++) {
                vec4 v = vSlot(t, u * LPR + part);
                [[unroll]] for (int r = 0; r < RPL; r++) {
                    acc[r * VSLOTS + u] += sc[r * BC + t] * v;
                }
            }
        }
    }

#ifdef SPLIT_K
    // The split's partial of each row, for attention_combine.comp: the
    // row's lanes write their slots, its first lane the max and sum.
    [[unroll]] for (int r = 0; r < RPL; r++) {
        if (!rowOK[r]) {
            continue;
        }
        bool live = partialLive(row[r], l[r]);
        int base = partialBase(head[r], row[r], split);
        if (part == 0) {
            storePartialSum(base, live, m[r], l[r]);
        }
        [[unroll]] for (int u = 0; u < VSLOTS; u++) {
            storePartialOut(base, live, u * LPR + part, acc[r * VSLOTS + u]);
        }
    }
#else
    [[unroll]] for (int r = 0; r < RPL; r++) {
        float inv = finishRow(m[r], l[r], head[r], row[r]);
        if (!rowOK[r]) {
            continue;
        }
        int oBase = outBase(head[r], row[r]);
        [[unroll]] for (int u = 0; u < VSLOTS; u++) {
            storeOut(oBase, u * LPR + part, acc[r * VSLOTS + u] * inv);
        }
        if (part == 0) {
            storeLSE(head[r], row[r], m[r], l[r]);
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
            [[unroll]] for (int r = 0; r < RPL; r++) {
                [[unroll]] for (int t = 0; t < BC; t++) {
                    int j = j0 + t;
                    if (rowOK[r] && t % LPR == part && j < S) {
                        storeWeight(head[r], row[r], j, sc[r * BC + t], m[r], l[r]);
                    }
                }
            }
        }
    }
#endif
}
