#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#ifdef SHARED_LOADS
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// Fused scaled dot-product attention forward, fp32, online softmax
// (FlashAttention-style): each invocation owns ROWS query rows of one
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
//   VEC4_LOADS: Q, K, V rows are read four floats at a time (RGBA32F texels
//     or vec4 storage); needs d % 4 == 0 and 4-aligned offsets and strides.
//     Otherwise scalar loads assemble each vec4 (any width).
//   ADDITIVE: additive (Bahdanau) scores w_a . tanh(q + k) on projected
//     queries and keys (width d_k = d_a), w_a at binding 11; no scale.
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

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int D4 = 16;  // compile-time bound of d_k and d_v, in vec4s
layout(constant_id = 2) const int ROWS = 2; // query rows per invocation
layout(constant_id = 3) const int WG = 8;   // = local_size_x; rows interleave by it
layout(constant_id = 4) const int KEYS = 4; // keys per online-softmax step
// MASKED: the call has an additive, boolean or key-padding mask. Without
// one the mask loads are compiled out: lavapipe runs both sides of a
// branch, even a uniform one, and the three unused loads per key took ~30%
// of the prefill time.
layout(constant_id = 5) const bool MASKED = true;
layout(constant_id = 6) const int SHARE = 1; // lanes sharing K/V row loads (SHARED_LOADS)
// Element types of Q, K and V (TYPE_F32, TYPE_F16, TYPE_BF16 of loads.glsl).
layout(constant_id = 7) const int Q_TYPE = 0;
layout(constant_id = 8) const int K_TYPE = 0;
layout(constant_id = 9) const int V_TYPE = 0;
// VARIANTS: the score variants compiled in (SEMANTICS.md §4.1), a bit each;
// like MASKED, unused ones cost nothing.
layout(constant_id = 10) const int VARIANTS = 0;
const int VAR_WINDOW = 1;  // keys outside P.window's band are blocked
const int VAR_SOFTCAP = 2; // s -> c tanh(s / c), c = P.variant.x
const int VAR_ALIBI = 4;   // s += slope_h * (j - (t + S - L)), slopes at binding 11
const int VAR_SINKS = 8;   // a logit per head joins the denominator, at binding 11
// PAGED: K and V live in a pool of pages of P.page.x positions (page p of
// KV head h at p * stride.x + h * stride.y); key j of item b is row
// j % P.page.x of page table[b][j / P.page.x] (binding 12, P.page.y
// entries per item), as paged attention reads a block table.
layout(constant_id = 11) const bool PAGED = false;

const int FLAG_MASK = 1;     // additive mask bound at binding 4
const int FLAG_BOOLMASK = 2; // boolean mask (as 0 / -inf) bound at binding 5
const int FLAG_CAUSAL = 4;
const int FLAG_LENGTHS = 8;  // per-batch key and query lengths at binding 6
const int FLAG_LSE = 16;
const int FLAG_WEIGHTS = 32;
const int FLAG_KEYPAD = 64; // key padding (B, S) as 0 / -inf at binding 10
const int FLAG_SINKS = 128; // (the combine pass reads it: sinks at binding 11)
// Bottom-right positions count from each item's key length, not S: for
// the causal mask, and for the window and ALiBi.
const int FLAG_ALIGN_CAUSAL = 256;
const int FLAG_ALIGN_POS = 512;

const float LOG2E = 1.4426950408889634;
const float NEG_INF = -1.0 / 0.0;

#include "attention_params.glsl"

#include "loads.glsl"
INPUT(1, Qt)
INPUT(2, Kt)
INPUT(3, Vt)
#ifdef TEXEL_LOADS
layout(binding = 4) uniform samplerBuffer Mt;
layout(binding = 5) uniform samplerBuffer Bt;
layout(binding = 10) uniform samplerBuffer Pt;
#define LOAD_M(i) texelFetch(Mt, (i)).r
#define LOAD_B(i) texelFetch(Bt, (i)).r
#define LOAD_PAD(i) texelFetch(Pt, (i)).r
#else
layout(std430, binding = 4) readonly buffer MBuf { float mData[]; };
layout(std430, binding = 5) readonly buffer BBuf { float bData[]; };
layout(std430, binding = 10) readonly buffer PadBuf { float padData[]; };
#define LOAD_M(i) mData[(i)]
#define LOAD_B(i) bData[(i)]
#define LOAD_PAD(i) padData[(i)]
#endif

layout(std430, binding = 6) readonly buffer Lengths { int lengths[]; }; // [0,B) keys, [B,2B) queries of the whole call
layout(std430, binding = 7) writeonly buffer OBuf { float oData[]; };
layout(std430, binding = 8) writeonly buffer LseBuf { float lseData[]; };
layout(std430, binding = 9) writeonly buffer WBuf { float wData[]; }; // weights, or split-K partials
#ifdef ADDITIVE
layout(std430, binding = 13) readonly buffer WaBuf { float waData[]; }; // w_a, d_k floats
vec4 wa[D4]; // w_a, zero past d_k
#endif

vec4 q[ROWS * D4];   // query rows as stored (scaling them first would break exact ties)
vec4 acc[ROWS * D4]; // unnormalised output rows
float sc[ROWS];      // scores of the current key (scaled, masked; natural units)
// Per query head: sink logit at 2h, ALiBi slope at 2h + 1.
layout(std430, binding = 11) readonly buffer HeadBuf { float headData[]; };
float slope[ROWS]; // each row's ALiBi slope
layout(std430, binding = 12) readonly buffer PageTable { int pageOf[]; };
int rowOf[ROWS];  // query position of each row (clamped into range)
int headOf[ROWS]; // query head of each row
bool rowOK[ROWS]; // the row exists (not past L, or past the packed GQA rows)

int L, S, DK, DV, flags, shift, b, hk;
int posShift; // key position of query row 0 for the window and ALiBi

#ifdef SHARED_LOADS
#ifdef SPLIT_K
#error "split-K lanes read different keys: no shared loads"
#endif
const int SLOTS = (D4 + SHARE - 1) / SHARE; // vec4 slots each lane fetches per row

// LOAD_SHARED fetches this lane's slots of the row at base: slot
// u * SHARE + lane, clamped (the clamped copies are never shuffled out).
#define LOAD_SHARED(own, buf, T, base, n)                                                         \
    [[unroll]] for (int u = 0; u < SLOTS; u++) {                                                \
        own[u] = LOAD4(buf, T, base, min(u * SHARE + int(gl_SubgroupInvocationID), D4 - 1), n); \
    }
// Slot c of a row loaded by LOAD_SHARED into own.
#define SLOT(own, c) subgroupShuffle(own[(c) / SHARE], (c) % SHARE)
#endif

// keyRow is where key position j of this item starts in K or V (of the
// given strides), but for the head's offset.
int keyRow(ivec4 stride, int j) {
    if (PAGED) {
        int page = pageOf[(P.chunk.z + b) * P.page.y + j / P.page.x];
        return page * stride.x + (j % P.page.x) * stride.z;
    }
    return b * stride.x + j * stride.z;
}

// keyScores fills sc for key j; a key that is out of range or masked gets
// -inf.
void keyScores(int j, int keyEnd) {
    int jc = min(j, S - 1); // clamp so loads stay in bounds; masked below
    int kBase = P.offsets.y + hk * P.kStride.y + keyRow(P.kStride, jc);
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        sc[r] = 0.0;
    }
#ifdef SHARED_LOADS
    vec4 kOwn[SLOTS];
    LOAD_SHARED(kOwn, Kt, K_TYPE, kBase, DK)
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
        int row = rowOf[r];
        bool ok = j < keyEnd;
        if ((flags & FLAG_CAUSAL) != 0) {
            ok = ok && j <= row + shift;
        }
        float add = 0.0;
        if (MASKED) {
            if ((flags & FLAG_MASK) != 0) {
                add += LOAD_M(P.chunk.x + b * P.mStride.x + headOf[r] * P.mStride.y + row * P.mStride.z + jc * P.mStride.w);
            }
            if ((flags & FLAG_BOOLMASK) != 0) {
                add += LOAD_B(P.chunk.y + b * P.bStride.x + headOf[r] * P.bStride.y + row * P.bStride.z + jc * P.bStride.w);
            }
            if ((flags & FLAG_KEYPAD) != 0) {
                add += LOAD_PAD((P.chunk.z + b) * S + jc);
            }
        }
        // The dot product of the stored values, scaled once: equal dot
        // products give equal scores (SEMANTICS.md §7, exact ties). Scores
        // stay in natural units; only differences from the running max go
        // to base 2, so a finite mask as large as float32 allows (-FLT_MAX,
        // as models save "blocked") never overflows to -inf.
        float e = sc[r] * P.scaling.x;
        if ((VARIANTS & VAR_SOFTCAP) != 0) {
            e = P.variant.x * tanh(e / P.variant.x);
        }
        // Window and ALiBi positions are bottom-right aligned: query row t
        // sits at key position t + S - L (P.window.z holds S - L plus the
        // chunk's first row).
        int pos = row + posShift;
        if ((VARIANTS & VAR_ALIBI) != 0) {
            e += slope[r] * float(j - pos);
        }
        if ((VARIANTS & VAR_WINDOW) != 0) {
            ok = ok && (P.window.x < 0 || j >= pos - P.window.x) && (P.window.y < 0 || j <= pos + P.window.y);
        }
        e += add;
        sc[r] = (ok && e != NEG_INF) ? e : NEG_INF;
    }
}

void main() {
    L = P.dims.x;
    S = P.dims.y;
    DK = P.dims.z;
    DV = P.dims.w;
    int group = P.heads.y;
    flags = P.heads.z;
    shift = P.heads.w;
    b = int(gl_WorkGroupID.z);
    int lane = int(gl_LocalInvocationID.x);
    int H; // query heads

    int keyLen = S;
    int queryLen = P.outs.z; // the call's rows (L is this chunk's)
    if ((flags & FLAG_LENGTHS) != 0) {
        keyLen = lengths[P.chunk.z + b];
        queryLen = lengths[P.chunk.w + P.chunk.z + b];
    }
    // Bottom-right alignment to this item's key length: the chunk's first
    // row l0 plus keyLen - L (P.outs.z is the call's L).
    posShift = (flags & FLAG_ALIGN_POS) != 0 ? P.outs.w + keyLen - P.outs.z : P.window.z;
    if ((flags & FLAG_ALIGN_CAUSAL) != 0) {
        shift = P.outs.w + keyLen - P.outs.z;
    }
#ifdef SPLIT_K
    int rowBlocks = P.split.z;
    hk = int(gl_WorkGroupID.y) / rowBlocks;
    H = (int(gl_NumWorkGroups.y) / rowBlocks) * group;
    int packed = group * L; // rows of all query heads of this KV head
    int split = int(gl_WorkGroupID.x) * WG + lane;
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        int rho = (int(gl_WorkGroupID.y) % rowBlocks) * ROWS + r;
        rowOK[r] = rho < packed && split < P.split.x;
        rho = min(rho, packed - 1);
        rowOf[r] = rho % L;
        headOf[r] = hk * group + rho / L;
    }
    // Every lane walks the same number of keys (uniform trip count); keys
    // past its split or past the key length are masked.
    int keyBegin = split * P.split.y;
    int keyStop = keyBegin + P.split.y;
    int keyEnd = min(keyStop, keyLen);
#else
    H = int(gl_NumWorkGroups.y);
    int h = int(gl_WorkGroupID.y);
    hk = h / group;
    int rowBase = int(gl_WorkGroupID.x) * ROWS * WG;
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
    if ((flags & FLAG_CAUSAL) != 0) {
        keyEnd = clamp(lastRow + shift + 1, 0, keyLen);
    }
    // Keys outside every row's window band are never loaded.
    if ((VARIANTS & VAR_WINDOW) != 0) {
        if (P.window.y >= 0) {
            keyEnd = clamp(lastRow + posShift + P.window.y + 1, 0, keyEnd);
        }
        if (P.window.x >= 0) {
            keyBegin = clamp(rowBase + posShift - P.window.x, 0, keyEnd);
        }
    }
    int keyStop = keyEnd;
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
        slope[r] = (VARIANTS & VAR_ALIBI) != 0 ? headData[2 * (P.window.w + headOf[r]) + 1] : 0.0;
        int qBase = P.offsets.x + b * P.qStride.x + headOf[r] * P.qStride.y + rowOf[r] * P.qStride.z;
        [[unroll]] for (int c = 0; c < D4; c++) {
            q[r * D4 + c] = LOAD4(Qt, Q_TYPE, qBase, c, DK);
            acc[r * D4 + c] = vec4(0.0);
        }
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
        [[unroll]] for (int t = 0; t < KEYS; t++) {
            keyScores(j0 + t, keyEnd);
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                p[t * ROWS + r] = sc[r];
            }
        }
        float alpha[ROWS];
        [[unroll]] for (int r = 0; r < ROWS; r++) {
            float mNew = m[r];
            [[unroll]] for (int t = 0; t < KEYS; t++) {
                mNew = max(mNew, p[t * ROWS + r]);
            }
            // While every key so far is masked mNew is -inf: keep alpha 1
            // (never exp2(-inf - -inf)); acc and l are still zero then.
            alpha[r] = mNew == NEG_INF ? 1.0 : exp2((m[r] - mNew) * LOG2E);
            m[r] = mNew;
            l[r] *= alpha[r];
            [[unroll]] for (int t = 0; t < KEYS; t++) {
                float x = p[t * ROWS + r];
                p[t * ROWS + r] = x == NEG_INF ? 0.0 : exp2((x - mNew) * LOG2E);
                l[r] += p[t * ROWS + r];
            }
        }
        int vBase[KEYS];
        [[unroll]] for (int t = 0; t < KEYS; t++) {
            vBase[t] = P.offsets.z + hk * P.vStride.y + keyRow(P.vStride, min(j0 + t, S - 1));
        }
#ifdef SHARED_LOADS
        vec4 vOwn[KEYS][SLOTS];
        [[unroll]] for (int t = 0; t < KEYS; t++) {
            LOAD_SHARED(vOwn[t], Vt, V_TYPE, vBase[t], DV)
        }
#endif
        [[unroll]] for (int c = 0; c < D4; c++) {
            vec4 v[KEYS];
            [[unroll]] for (int t = 0; t < KEYS; t++) {
#ifdef SHARED_LOADS
                v[t] = SLOT(vOwn[t], c);
#else
                v[t] = LOAD4(Vt, V_TYPE, vBase[t], c, DV);
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
    // Partial results: max (natural units), sum, unnormalised output row.
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        if (!rowOK[r]) {
            continue;
        }
        bool live = rowOf[r] < queryLen && l[r] > 0.0;
        int base = (((b * H + headOf[r]) * L + rowOf[r]) * P.split.x + split) * (DV + 2);
        wData[base] = live ? m[r] : NEG_INF;
        wData[base + 1] = live ? l[r] : 0.0;
        [[unroll]] for (int c = 0; c < D4; c++) {
            [[unroll]] for (int t = 0; t < 4; t++) {
                if (4 * c + t < DV) {
                    wData[base + 2 + 4 * c + t] = live ? acc[r * D4 + c][t] : 0.0;
                }
            }
        }
    }
#else
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        int row = rowOf[r];
        if (!rowOK[r]) {
            continue;
        }
        bool padded = P.outs.w + row >= queryLen;
        float alpha = 1.0;
        if ((VARIANTS & VAR_SINKS) != 0 && !padded) {
            // The sink joins the denominator only: m' = max(m, sink),
            // l' = l e^(m - m') + e^(sink - m'); acc is rescaled by
            // e^(m - m') below (0 when no key was visible).
            float sink = headData[2 * (P.window.w + headOf[r])];
            float mNew = max(m[r], sink);
            alpha = exp2((m[r] - mNew) * LOG2E);
            l[r] = l[r] * alpha + exp2((sink - mNew) * LOG2E);
            m[r] = mNew;
        }
        // A padded query row or a row with no visible key (and no sink) has
        // no softmax: vkattn defines its output as zeros and its
        // log-sum-exp as -inf.
        bool live = !padded && l[r] > 0.0;
        float inv = live ? alpha / l[r] : 0.0;
        int oBase = P.offsets.w + b * P.oStride.x + headOf[r] * P.oStride.y + row * P.oStride.z;
        [[unroll]] for (int c = 0; c < D4; c++) {
            vec4 o = acc[r * D4 + c] * inv;
            [[unroll]] for (int t = 0; t < 4; t++) {
                if (4 * c + t < DV) {
                    oData[oBase + 4 * c + t] = o[t];
                }
            }
        }
        int lseIndex = (b * H + headOf[r]) * P.outs.z + row;
        if ((flags & FLAG_LSE) != 0) {
            lseData[P.outs.x + lseIndex] = live ? m[r] + log(l[r]) : NEG_INF;
        }
        if (!live) {
            l[r] = 0.0;
        }
    }

    if ((flags & FLAG_WEIGHTS) != 0) {
        // Second pass for the optional (B,H,L,S) weights: recompute each
        // tile's scores and normalise with the final max and sum.
        for (int j = 0; j < S; j++) {
            keyScores(j, keyLen);
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                int row = rowOf[r];
                if (!rowOK[r]) {
                    continue;
                }
                float e = sc[r];
                wData[P.outs.y + ((b * H + headOf[r]) * P.outs.z + row) * S + j] = (l[r] > 0.0 && e != NEG_INF) ? exp2((e - m[r]) * LOG2E) / l[r] : 0.0;
            }
        }
    }
#endif
}
