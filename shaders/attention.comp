#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#ifdef SHARED_LOADS
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// Fused scaled dot-product attention forward, computed in fp32 (half
// inputs widened on load), online softmax (FlashAttention-style): each
// invocation owns ROWS query rows of one
// (batch, head), walks the keys four at a time with a running maximum and
// running sum, and never stores the L x S score matrix.
//
// Every loop that indexes the per-row register arrays (q, acc) has a
// compile-time trip count and is unrolled, so the arrays stay in registers.
// Mesa 22.3's lavapipe moves indirectly indexed private arrays to scratch
// memory and then returned wrong results once a row saw more than a few
// hundred keys; fully unrolled indexing avoids that path on every driver.
//
// Variants (shaders/manifest.txt):
//   TEXEL_LOADS: Q, K, V and masks are read through uniform texel buffers; on
//     lavapipe a texelFetch in a loop is ~20x faster than a storage load.
//     Otherwise plain storage buffers, the portable path for real GPUs.
//   VEC4_LOADS: Q, K, V rows are read four elements at a time (RGBA32UI or
//     RGBA16UI texels, or uvec4 / uvec2 storage words, widened by
//     loads.glsl); needs d % 4 == 0 and 4-aligned offsets and strides.
//     With HALVES8 (texel path) halves are read eight a texel.
//     Otherwise scalar loads assemble each vec4 (any width).
//   ADDITIVE: additive (Bahdanau) scores w_a . tanh(q + k) on projected
//     queries and keys (width d_k = d_a), w_a at binding 13; no scale.
//   SPLIT_K: flash-decoding for few query rows and many keys. Each lane owns
//     one split of the keys; the rows of an invocation are the query rows of
//     all query heads sharing one K/V head (GQA), so each K/V element is
//     read once per row block of its KV head. Lanes write unnormalised
//     partial results (max, sum, output) to binding 9, and
//     attention_combine.comp merges them.
//   SHARED_LOADS (not with SPLIT_K): every lane of a subgroup reads the
//     same K and V rows, so each lane fetches every SHARE-th vec4 slot and
//     takes the others from its neighbours by subgroupShuffle: D4/SHARE
//     fetches per lane and row instead of D4. On lavapipe a texel fetch is
//     a call with a per-lane gather, and this cut the prefill time ~20%.
// D4 (widths in vec4 slots), ROWS, KEYS, MASKED, SHARE and the workgroup
// size are specialization constants chosen by the planner.

#include "interface.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = SPEC_D4) const int D4 = 16;  // compile-time bound of d_k and d_v, in vec4s
layout(constant_id = SPEC_ROWS) const int ROWS = 2; // query rows per invocation
layout(constant_id = SPEC_WG) const int WG = 8;   // = local_size_x; rows interleave by it
layout(constant_id = SPEC_KEYS) const int KEYS = 4; // keys per online-softmax step
// MASKED: which of the additive, boolean and key-padding masks the call
// has (their FLAG_* bits). The others' loads are compiled out: lavapipe
// runs both sides of a branch, even a uniform one, and the three unused
// loads per key took ~30% of the prefill time (two unused beside an
// additive mask, half of a masked prefill's).
layout(constant_id = SPEC_MASKED) const int MASKED = 67; // FLAG_* bits of the masks the call has (attention_common.glsl)
layout(constant_id = SPEC_SHARE) const int SHARE = 1; // lanes sharing K/V row loads (SHARED_LOADS)
// Element types of Q, K and V (TYPE_F32, TYPE_F16, TYPE_BF16 of interface.glsl).
layout(constant_id = SPEC_Q_TYPE) const int Q_TYPE = 0;
layout(constant_id = SPEC_K_TYPE) const int K_TYPE = 0;
layout(constant_id = SPEC_V_TYPE) const int V_TYPE = 0;
// VARIANTS: the score variants compiled in (SEMANTICS.md §4.1), a bit each;
// like MASKED, unused ones cost nothing.
layout(constant_id = SPEC_VARIANTS) const int VARIANTS = 0;
// PAGED: K and V are read through a page table (attention_common.glsl).
layout(constant_id = SPEC_PAGED) const bool PAGED = false;
// MASK4 (texel path, not SPLIT_K; KEYS a multiple of 4): the FLAG_MASK
// and FLAG_BOOLMASK bits of the masks that are four-float texel views,
// read four keys a fetch in steps that start on multiples of 4 (a fetch a
// key and row took more of a masked prefill's time than K and V).
layout(constant_id = SPEC_MASK4) const int MASK4_SPEC = 0;
#ifdef TEXEL_LOADS
#define MASK4 MASK4_SPEC
#else
#define MASK4 0
#endif

#include "attention_forward.glsl"

// The texel path is CPU drivers' plan: there float16 K/V widen by the
// driver's conversion (lavapipe: F16C, subnormals kept, which
// TestHalfWideningIsExact checks): f16 K/V decode ran 25-40% faster than
// with the integer widening.
#ifdef TEXEL_LOADS
#define UNPACK_HALVES
#endif
// Half inputs come eight a texel (loads.glsl's HALVES8).
layout(constant_id = SPEC_HALVES8) const bool HALVES8_SPEC = false;
#define HALVES8 HALVES8_SPEC
// q8_0 / q4_0 rows of whole blocks, read a texel and a scale once for the
// slots sharing them (loads.glsl's QUANT_BLOCKS).
layout(constant_id = SPEC_QUANT_BLOCKS) const bool QUANT_BLOCKS_SPEC = false;
#define QUANT_BLOCKS QUANT_BLOCKS_SPEC
#include "attention_inputs.glsl"
#ifdef ADDITIVE
layout(std430, binding = BIND_WA) readonly buffer WaBuf { float waData[]; }; // w_a, d_k floats
vec4 wa[D4]; // w_a, zero past d_k
#endif

vec4 q[ROWS * D4];   // query rows as stored (scaling them first would break exact ties)
vec4 acc[ROWS * D4]; // unnormalised output rows
float sc[ROWS];      // scores of the current key (scaled, masked; natural units)
float slope[ROWS];   // each row's ALiBi slope
int rowOf[ROWS];  // query position of each row (clamped into range)
int headOf[ROWS]; // query head of each row
bool rowOK[ROWS]; // the row exists (not past L, or past the packed GQA rows)

#ifdef SHARED_LOADS
#ifdef SPLIT_K
#error "split-K lanes read different keys: no shared loads"
#endif
const int SLOTS = (D4 + SHARE - 1) / SHARE; // vec4 slots each lane fetches per row

// LOAD_SHARED fetches this lane's slots of the row at base with load (a
// LOAD4 of loads.glsl): slot u * SHARE + lane, clamped (the clamped copies
// are never shuffled out).
#define LOAD_SHARED(own, load, buf, T, base, n)                                                  \
    [[unroll]] for (int u = 0; u < SLOTS; u++) {                                                \
        own[u] = load(buf, T, base, min(u * SHARE + int(gl_SubgroupInvocationID), D4 - 1), n); \
    }
// Slot c of a row loaded by LOAD_SHARED into own.
#define SLOT(own, c) subgroupShuffle(own[(c) / SHARE], (c) % SHARE)
#endif

// keyScores fills sc for key j; a key that is out of range or masked gets
// -inf. maskOf[r] is the sum of the MASK4 masks' values for row r.
void keyScores(int j, int keyEnd, float maskOf[ROWS]) {
    int jc = min(j, S - 1); // clamp so loads stay in bounds; masked below
    int kBase = kOffset() + hk * P.kStride.y + keyRow(P.kStride, jc);
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        sc[r] = 0.0;
    }
#ifdef SHARED_LOADS
    vec4 kOwn[SLOTS];
    LOAD_SHARED(kOwn, LOAD4, Kt, K_TYPE, kBase, DK)
#endif
    [[unroll]] for (int c = 0; c < D4; c++) {
#ifdef SHARED_LOADS
        vec4 k4 = SLOT(kOwn, c);
#else
        vec4 k4 = LOAD4(Kt, K_TYPE, kBase, c, DK);
#endif
        [[unroll]] for (int r = 0; r < ROWS; r++) {
#ifdef ADDITIVE
            // Bahdanau: q and k are the projections q W_q + b and k W_k;
            // slots past d_k hold tanh(0) * 0.
            sc[r] += dot(wa[c], tanh(q[r * D4 + c] + k4));
#else
            sc[r] += dot(q[r * D4 + c], k4);
#endif
        }
    }
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        sc[r] = scoreWith(sc[r], MASK4, maskOf[r], rowOf[r], headOf[r], slope[r], j, keyEnd);
    }
}

void main() {
    int lane = int(gl_LocalInvocationID.x);

#ifdef SPLIT_K
    // The invocation's rows: ROWS packed rows of KV head hk (the same for
    // the workgroup), of its split of the keys (a lane's own).
    int rowBase = initIndices(ROWS, false);
    int split = int(gl_WorkGroupID.x) * WG + lane;
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        rowOK[r] = packedRow(rowBase + r, rowOf[r], headOf[r]) && split < splitCount();
    }
    // Every lane walks the same number of keys (uniform trip count); keys
    // past its split or past the key length are masked.
    int keyBegin = split * splitKeys();
    int keyStop = keyBegin + splitKeys();
    int keyEnd = min(keyStop, keyLen);
    // Lane i walks its split from its i-th key, wrapping around. Splits
    // start a multiple of 4 KiB apart, so lanes reading their splits in
    // step read rows in the same L1 sets: 16 lanes evicted each other's
    // lines before their next slots were read (lavapipe at 512 bits,
    // decode without GQA: 1.5x faster staggered).
    int keyRot = min(lane, splitKeys() - 1);
#define KEY_AT(j) (keyBegin + ((j) - keyBegin + keyRot) - ((j) - keyBegin + keyRot >= splitKeys() ? splitKeys() : 0))
#else
    // The invocation's rows: ROWS rows of query head h, interleaved with
    // the other lanes' of the workgroup's block.
    int rowBase = initIndices(ROWS * WG, true);
    int h = int(gl_WorkGroupID.y);
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        int row = rowBase + r * WG + lane;
        rowOK[r] = row < L;
        rowOf[r] = min(row, L - 1);
        headOf[r] = h;
    }
    // The key loop bound is the same for the whole workgroup (uniform control
    // flow keeps lavapipe fast); rows that must see fewer keys mask them.
    int keyBegin = 0;
    int keyEnd = keyLen;
    int lastRow = min(L, rowBase + ROWS * WG) - 1;
    keyRange(rowBase, lastRow, keyBegin, keyEnd);
    if (MASK4 != 0) {
        keyBegin &= ~3; // steps from a multiple of 4; the keys before are masked
    }
    int keyStop = keyEnd;
#define KEY_AT(j) (j)
#endif

#ifdef ADDITIVE
    [[unroll]] for (int c = 0; c < D4; c++) {
        wa[c] = vec4(0.0);
        [[unroll]] for (int t = 0; t < 4; t++) {
            if (4 * c + t < DK) {
                wa[c][t] = waData[4 * c + t];
            }
        }
    }
#endif
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        slope[r] = slopeOf(headOf[r]);
        int qBase = qOffset() + b * P.qStride.x + headOf[r] * P.qStride.y + rowOf[r] * P.qStride.z;
        [[unroll]] for (int c = 0; c < D4; c++) {
            q[r * D4 + c] = LOAD4(Qt, Q_TYPE, qBase, c, DK);
            acc[r * D4 + c] = vec4(0.0);
        }
    }
    // MASK4: where each row's additive and boolean mask rows start
    // (multiples of 4).
    int maskRow[ROWS];
    int boolRow[ROWS];
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        maskRow[r] = maskOffset() + b * P.mStride.x + headOf[r] * P.mStride.y + rowOf[r] * P.mStride.z;
        boolRow[r] = boolMaskOffset() + b * P.bStride.x + headOf[r] * P.bStride.y + rowOf[r] * P.bStride.z;
    }
    float m[ROWS];
    float l[ROWS];
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        m[r] = NEG_INF;
        l[r] = 0.0;
    }

    // KEYS keys per step, every loop over them unrolled, so every private
    // array is indexed by constants only (no dynamically indexed score
    // tile), and acc, which the loop carries, is written once per step
    // with the softmax rescaling folded into that write (our reading of
    // lavapipe: each write of a loop-carried value costs a masked store;
    // measured there, 4 keys per step took ~30% less CPU than 1, and 8 no
    // less than 4 but compiled 2-3x longer; a lazily skipped rescale behind
    // a subgroupAny branch cost ~15% more than this).
    for (int j0 = keyBegin; j0 < keyStop; j0 += KEYS) {
        // Keys past the end are masked by keyScores (keyEnd <= keyStop,
        // and split-K chunks are multiples of KEYS).
        float p[KEYS * ROWS];
        float maskOf[KEYS][ROWS];
        [[unroll]] for (int r = 0; r < ROWS; r++) {
            [[unroll]] for (int t = 0; t < KEYS; t++) {
                maskOf[t][r] = 0.0;
            }
#ifdef TEXEL_LOADS
            // Keys past S are masked; their texels are clamped into the row.
            [[unroll]] for (int t4 = 0; t4 < KEYS / 4; t4++) {
                vec4 m4 = vec4(0.0);
                if ((MASK4 & FLAG_MASK) != 0) {
                    m4 += texelFetch(Mt, min((maskRow[r] + j0) / 4 + t4, (maskRow[r] + S - 1) / 4));
                }
                if ((MASK4 & FLAG_BOOLMASK) != 0) {
                    m4 += texelFetch(Bt, min((boolRow[r] + j0) / 4 + t4, (boolRow[r] + S - 1) / 4));
                }
                [[unroll]] for (int i = 0; i < 4; i++) {
                    maskOf[4 * t4 + i][r] = m4[i];
                }
            }
#endif
        }
        [[unroll]] for (int t = 0; t < KEYS; t++) {
            keyScores(KEY_AT(j0 + t), keyEnd, maskOf[t]);
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                p[t * ROWS + r] = sc[r];
            }
        }
        float alpha[ROWS];
        [[unroll]] for (int r = 0; r < ROWS; r++) {
            ONLINE_SOFTMAX(t, KEYS, p[t * ROWS + r], m[r], l[r], alpha[r])
        }
        int vBase[KEYS];
        [[unroll]] for (int t = 0; t < KEYS; t++) {
            vBase[t] = vOffset() + hk * P.vStride.y + keyRow(P.vStride, min(KEY_AT(j0 + t), S - 1));
        }
#ifdef SHARED_LOADS
        vec4 vOwn[KEYS][SLOTS];
        [[unroll]] for (int t = 0; t < KEYS; t++) {
            LOAD_SHARED(vOwn[t], LOAD4_ANY_TAIL, Vt, V_TYPE, vBase[t], DV)
        }
#endif
        [[unroll]] for (int c = 0; c < D4; c++) {
            vec4 v[KEYS];
            [[unroll]] for (int t = 0; t < KEYS; t++) {
#ifdef SHARED_LOADS
                v[t] = SLOT(vOwn[t], c);
#else
                v[t] = LOAD4_ANY_TAIL(Vt, V_TYPE, vBase[t], c, DV); // slots past d_v are never stored
#endif
            }
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                vec4 sum = acc[r * D4 + c] * alpha[r]; // rescale folded into the one write
                [[unroll]] for (int t = 0; t < KEYS; t++) {
                    sum += p[t * ROWS + r] * v[t];
                }
                acc[r * D4 + c] = sum;
            }
        }
    }

#ifdef SPLIT_K
    // The split's partial of each row, for attention_combine.comp.
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        if (!rowOK[r]) {
            continue;
        }
        bool live = partialLive(rowOf[r], l[r]);
        int base = partialBase(headOf[r], rowOf[r], split);
        storePartialSum(base, live, m[r], l[r]);
        [[unroll]] for (int c = 0; c < D4; c++) {
            storePartialOut(base, live, c, acc[r * D4 + c]);
        }
    }
#else
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        if (!rowOK[r]) {
            continue;
        }
        float inv = finishRow(m[r], l[r], headOf[r], rowOf[r]);
        int oBase = outBase(headOf[r], rowOf[r]);
        [[unroll]] for (int c = 0; c < D4; c++) {
            storeOut(oBase, c, acc[r * D4 + c] * inv);
        }
        storeLSE(headOf[r], rowOf[r], m[r], l[r]);
    }

    if ((flags & FLAG_WEIGHTS) != 0) {
        // Second pass for the optional (B,H,L,S) weights: recompute each
        // tile's scores and normalise with the final max and sum.
        for (int j = 0; j < S; j++) {
            float maskOf[ROWS];
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                maskOf[r] = 0.0;
#ifdef TEXEL_LOADS
                if ((MASK4 & FLAG_MASK) != 0) {
                    maskOf[r] += texelFetch(Mt, (maskRow[r] + j) / 4)[j & 3];
                }
                if ((MASK4 & FLAG_BOOLMASK) != 0) {
                    maskOf[r] += texelFetch(Bt, (boolRow[r] + j) / 4)[j & 3];
                }
#endif
            }
            keyScores(j, keyLen, maskOf);
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                if (rowOK[r]) {
                    storeWeight(headOf[r], rowOf[r], j, sc[r], m[r], l[r]);
                }
            }
        }
    }
#endif
}
