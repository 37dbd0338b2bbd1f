#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "coopmat.glsl"
// Fused attention forward on the matrix units (VK_KHR_cooperative_matrix)
// for half (float16 or bfloat16) Q, K and V: attention_tiled.comp's loop
// order and workgroups (BR packed query rows of one KV head, BC keys per
// tile) with both products on cooperative matrices of MM x MM x MM,
// float16 inputs and float32 accumulators (SEMANTICS.md §9.3):
//
//   S = Q K^T   in float32 from the float16 rows (each product exact);
//   the online softmax of S, row by row in float32 (every option of the
//   tiled kernel: masks, lengths, causal alignments, score variants, LSE);
//   O = O * alpha + P V with P rounded to float16 (FlashAttention's
//   rounding; the row sums l add the unrounded P).
//
// Accumulators have an opaque layout, so S goes through shared memory for
// the softmax, and O lives in shared memory (float32) between tiles, where
// the rows are rescaled once per tile. Rows are padded to DP = 4 * D4
// columns of zeros (D4 divisible by MM / 4). The workgroup is NSG whole
// subgroups; subgroup g computes the MM x MM blocks g, g + NSG, ... of S
// and of O.
//
// A bfloat16 input reaches the float16 matrices scaled by a power of two
// per block (the query rows; each tile of keys, of values) that puts the
// block's largest finite |x| in [2^14, 2^15): bfloat16's 8-bit significands
// fit float16's 11, so only values below 2^-28 of the block's largest can
// round, and the products are scaled back in float32 (S before the
// softmax; each tile's P V before it joins O).

layout(constant_id = SPEC_D4) const int D4 = 16; // compile-time bound of d_k and d_v, in vec4s
layout(constant_id = SPEC_BR) const int BR = 16; // query rows per workgroup
layout(constant_id = SPEC_BC) const int BC = 16; // keys per tile
layout(constant_id = SPEC_MM) const int MM = 16; // the matrices' M = N = K
layout(constant_id = SPEC_NSG) const int NSG = 2; // subgroups per workgroup
layout(constant_id = SPEC_SG) const int SG = 32;  // lanes per subgroup (full subgroups required)
layout(constant_id = SPEC_MASKED) const int MASKED = 67; // FLAG_* bits of the masks read: all where the call has any (attention_common.glsl)
layout(constant_id = SPEC_VARIANTS) const int VARIANTS = 0;
layout(constant_id = SPEC_Q_TYPE) const int Q_TYPE = TYPE_F16; // or TYPE_BF16
layout(constant_id = SPEC_K_TYPE) const int K_TYPE = TYPE_F16;
layout(constant_id = SPEC_V_TYPE) const int V_TYPE = TYPE_F16;
const bool PAGED = false;

const int WG = NSG * SG;
const int DP = 4 * D4; // padded row width

#include "attention_forward.glsl"

#include "attention_inputs.glsl"

shared float16_t qS[BR * DP]; // the block's query rows
shared float16_t kS[BC * DP]; // a tile of keys
shared float16_t vS[BC * DP]; // and of values
shared float sS[BR * BC];     // the tile's dot products, then nothing
shared float16_t pS[BR * BC]; // the tile's probabilities, rounded
shared float oS[BR * DP];     // the unnormalised output rows
shared float alphaS[BR];      // each row's rescale of this tile
shared uint topS[5];          // bits of the largest finite |x|: Q's, then K's and V's by tile parity

// STAGE copies count rows of width n (row r from element baseOf(r) of
// src) into dst as float16 times scale, zero past n.
#define STAGE(dst, src, T, count, baseOf, n, scale)               \
    [[unroll]] for (int i0 = 0; i0 < count * D4; i0 += WG) {      \
        int i = i0 + lane;                                        \
        if (i < count * D4) {                                     \
            int r = i / D4;                                       \
            int c = i % D4;                                       \
            vec4 x = LOAD4(src, T, baseOf(r), c, n) * (scale);    \
            STORE_HALF4(dst, r * DP + 4 * c, x)                   \
        }                                                         \
    }

// TOP folds the largest finite |x| of the rows STAGE would copy into
// topS[slot] (a bfloat16 input only; non-negative floats order as their
// bits).
#define TOP(src, T, count, baseOf, n, slot)                                    \
    if (T == TYPE_BF16) {                                                      \
        uint top = 0u;                                                         \
        [[unroll]] for (int i0 = 0; i0 < count * D4; i0 += WG) {               \
            int i = i0 + lane;                                                 \
            if (i < count * D4) {                                              \
                top = max(top, finiteTop(LOAD4(src, T, baseOf(i / D4), i % D4, n))); \
            }                                                                  \
        }                                                                      \
        atomicMax(topS[slot], top);                                            \
    }

const bool SCALED = Q_TYPE == TYPE_BF16 || K_TYPE == TYPE_BF16 || V_TYPE == TYPE_BF16;

uint finiteTop(vec4 x) {
    uvec4 bits = floatBitsToUint(abs(x));
    bits = mix(bits, uvec4(0u), greaterThanEqual(bits, uvec4(0x7f800000u))); // Inf and NaN stay unscaled
    return max(max(bits.x, bits.y), max(bits.z, bits.w));
}

// pow2 is 2^e, exactly, for e in [-126, 127].
float pow2(int e) { return uintBitsToFloat(uint(e + 127) << 23); }

// blockExponent is the e that puts 2^e times a block's largest finite |x|
// (its bits top) in [2^14, 2^15): 0 for an all-zero block, at most 126
// for one below 2^-112 (whose values then err by under 2^-140).
int blockExponent(uint top, int T) {
    if (T != TYPE_BF16 || top == 0u) {
        return 0;
    }
    return min(14 - (int(top >> 23) - 127), 126);
}

int lane;
int rowBase;
int j0; // the tile's first key

int qRowBase(int r) {
    int row, head;
    packedRow(rowBase + r, row, head);
    return qOffset() + b * P.qStride.x + head * P.qStride.y + row * P.qStride.z;
}
int kRowBase(int t) { return kOffset() + hk * P.kStride.y + keyRow(P.kStride, min(j0 + t, S - 1)); }
int vRowBase(int t) { return vOffset() + hk * P.vStride.y + keyRow(P.vStride, min(j0 + t, S - 1)); }

void main() {
    rowBase = initIndices(BR, false);
    lane = int(gl_LocalInvocationID.x);
    int sg = int(gl_SubgroupID);

    // Lane r < BR owns packed row rowBase + r: its softmax state and output.
    int r = min(lane, BR - 1);
    int row, head;
    bool rowOK = packedRow(rowBase + r, row, head) && lane < BR;
    float slope = slopeOf(head);

    int keyBegin = 0;
    int keyEnd = keyLen;
    packedKeyRange(rowBase, BR, keyBegin, keyEnd);

    if (SCALED) {
        if (lane < 5) {
            topS[lane] = 0u;
        }
        barrier();
        TOP(Qt, Q_TYPE, BR, qRowBase, DK, 0)
        barrier();
    }
    int qExp = blockExponent(topS[0], Q_TYPE);
    STAGE(qS, Qt, Q_TYPE, BR, qRowBase, DK, pow2(qExp))
    [[unroll]] for (int i0 = 0; i0 < BR * DP; i0 += WG) {
        if (i0 + lane < BR * DP) {
            oS[i0 + lane] = 0.0;
        }
    }
    float m = NEG_INF;
    float l = 0.0;
    for (j0 = keyBegin; j0 < keyEnd; j0 += BC) {
        barrier(); // the previous tile is no longer read
        // The tile's scales: the slots of its parity were cleared by the
        // tile before, which the barrier above shows done reading them.
        int kExp = 0;
        int vExp = 0;
        if (SCALED) {
            int slot = 1 + 2 * (((j0 - keyBegin) / BC) & 1);
            if (lane < 2) {
                topS[4 - slot + lane] = 0u; // the other parity's K and V
            }
            TOP(Kt, K_TYPE, BC, kRowBase, DK, slot)
            TOP(Vt, V_TYPE, BC, vRowBase, DV, slot + 1)
            barrier();
            kExp = blockExponent(topS[slot], K_TYPE);
            vExp = blockExponent(topS[slot + 1], V_TYPE);
        }
        STAGE(kS, Kt, K_TYPE, BC, kRowBase, DK, pow2(kExp))
        STAGE(vS, Vt, V_TYPE, BC, vRowBase, DV, pow2(vExp))
        // S's scale back, 2^-(qExp + kExp), as two factors of one sign so
        // no product overflows or underflows before the score would.
        int down = -(qExp + kExp);
        float down0 = pow2(down / 2);
        float down1 = pow2(down - down / 2);
        barrier();
        // S = Q K^T: K's tile read column-major is K^T.
        [[unroll]] for (int blk0 = 0; blk0 < (BR / MM) * (BC / MM); blk0 += NSG) {
            int blk = blk0 + sg;
            if (blk < (BR / MM) * (BC / MM)) {
                int bi = blk / (BC / MM);
                int bj = blk % (BC / MM);
                MAT_C acc = MAT_C(0.0);
                MUL_ADD_BLOCKS(acc, DP / MM, qS, bi * MM * DP, MM, DP, kS, bj * MM * DP, MM, DP, gl_CooperativeMatrixLayoutColumnMajor)
                coopMatStore(acc, sS, bi * MM * BC + bj * MM, BC, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
        barrier();
        // The online softmax of each row over the tile.
        if (lane < BR) {
            float sc[BC];
            [[unroll]] for (int t = 0; t < BC; t++) {
                sc[t] = scoreOf(sS[r * BC + t] * down0 * down1, row, head, slope, j0 + t, keyEnd);
            }
            ONLINE_SOFTMAX(t, BC, sc[t], m, l, alphaS[r])
            [[unroll]] for (int t = 0; t < BC; t++) {
                pS[r * BC + t] = float16_t(sc[t]);
            }
        }
        barrier();
        [[unroll]] for (int i0 = 0; i0 < BR * DP; i0 += WG) {
            if (i0 + lane < BR * DP) {
                oS[i0 + lane] *= alphaS[(i0 + lane) / DP];
            }
        }
        barrier();
        // O += P V.
        [[unroll]] for (int blk0 = 0; blk0 < (BR / MM) * (DP / MM); blk0 += NSG) {
            int blk = blk0 + sg;
            if (blk < (BR / MM) * (DP / MM)) {
                int bi = blk / (DP / MM);
                int bd = blk % (DP / MM);
                MAT_C acc;
                coopMatLoad(acc, oS, bi * MM * DP + bd * MM, DP, gl_CooperativeMatrixLayoutRowMajor);
                // Scaled values: the tile's P V apart, scaled back as it joins O.
                MAT_C pv = acc;
                if (V_TYPE == TYPE_BF16) {
                    pv = MAT_C(0.0);
                }
                MUL_ADD_BLOCKS(pv, BC / MM, pS, bi * MM * BC, MM, BC, vS, bd * MM, MM * DP, DP, gl_CooperativeMatrixLayoutRowMajor)
                if (V_TYPE == TYPE_BF16) {
                    acc = acc + pv * pow2(-vExp);
                } else {
                    acc = pv;
                }
                coopMatStore(acc, oS, bi * MM * DP + bd * MM, DP, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
    }
    barrier();

    float inv = finishRow(m, l, head, row);
    if (rowOK) {
        int oBase = outBase(head, row);
        [[unroll]] for (int c = 0; c < D4; c++) {
            int i = r * DP + 4 * c;
            storeOut(oBase, c, vec4(oS[i], oS[i + 1], oS[i + 2], oS[i + 3]) * inv);
        }
        storeLSE(head, row, m, l);
    }
}
