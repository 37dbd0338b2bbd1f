#version 450
// Fused scaled dot-product attention forward, fp32, online softmax
// (FlashAttention-style): each invocation owns ROWS query rows of one
// (batch, head), walks the keys in tiles of KEY_TILE with a running maximum
// and running sum, and never stores the L x S score matrix.
//
// Variants (shaders/manifest.txt):
//   TEXEL_LOADS defined: Q, K, V and masks are read through R32F uniform texel
//     buffers. On lavapipe a texelFetch in a loop is ~20x faster than a
//     storage-buffer load (vulkan-notes.md).
//   otherwise: plain storage buffers, the portable path for real GPUs.
// Tiles and widths are specialization constants chosen by the planner.

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int D_MAX = 64;   // compile-time bound of d_k and d_v
layout(constant_id = 2) const int ROWS = 4;     // query rows per invocation
layout(constant_id = 3) const int KEY_TILE = 8; // keys per online-softmax step
layout(constant_id = 4) const int WG = 8;       // = local_size_x; rows interleave by it

const int FLAG_MASK = 1;     // additive mask bound at binding 4
const int FLAG_BOOLMASK = 2; // boolean mask (as 0 / -inf) bound at binding 5
const int FLAG_CAUSAL = 4;
const int FLAG_LENGTHS = 8;  // per-batch key and query lengths at binding 6
const int FLAG_LSE = 16;
const int FLAG_WEIGHTS = 32;

const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;
const float NEG_INF = -1.0 / 0.0;

// All strides and offsets are in elements. A stride of 0 broadcasts.
layout(std140, binding = 0) uniform Params {
    ivec4 dims;     // L, S, d_k, d_v
    ivec4 heads;    // B, group = H / H_kv, flags, causal shift (0 top-left, S-L bottom-right)
    ivec4 offsets;  // Q, K, V, O element offsets
    ivec4 qStride;  // b, h, l (last axis contiguous)
    ivec4 kStride;  // b, h_kv, s
    ivec4 vStride;  // b, h_kv, s
    ivec4 oStride;  // b, h, l
    ivec4 mStride;  // additive mask b, h, l, s
    ivec4 bStride;  // boolean mask b, h, l, s
    vec4 scaling;   // x = scale * log2(e)
} P;

#ifdef TEXEL_LOADS
layout(binding = 1) uniform samplerBuffer Qt;
layout(binding = 2) uniform samplerBuffer Kt;
layout(binding = 3) uniform samplerBuffer Vt;
layout(binding = 4) uniform samplerBuffer Mt;
layout(binding = 5) uniform samplerBuffer Bt;
#define LOAD_Q(i) texelFetch(Qt, (i)).r
#define LOAD_K(i) texelFetch(Kt, (i)).r
#define LOAD_V(i) texelFetch(Vt, (i)).r
#define LOAD_M(i) texelFetch(Mt, (i)).r
#define LOAD_B(i) texelFetch(Bt, (i)).r
#else
layout(std430, binding = 1) readonly buffer QBuf { float qData[]; };
layout(std430, binding = 2) readonly buffer KBuf { float kData[]; };
layout(std430, binding = 3) readonly buffer VBuf { float vData[]; };
layout(std430, binding = 4) readonly buffer MBuf { float mData[]; };
layout(std430, binding = 5) readonly buffer BBuf { float bData[]; };
#define LOAD_Q(i) qData[(i)]
#define LOAD_K(i) kData[(i)]
#define LOAD_V(i) vData[(i)]
#define LOAD_M(i) mData[(i)]
#define LOAD_B(i) bData[(i)]
#endif

layout(std430, binding = 6) readonly buffer Lengths { int lengths[]; }; // [0,B) keys, [B,2B) queries
layout(std430, binding = 7) writeonly buffer OBuf { float oData[]; };
layout(std430, binding = 8) writeonly buffer LseBuf { float lseData[]; };
layout(std430, binding = 9) writeonly buffer WBuf { float wData[]; };

float q[ROWS * D_MAX];     // query rows, pre-multiplied by scale*log2(e)
float acc[ROWS * D_MAX];   // unnormalised output rows
float s[ROWS * KEY_TILE];  // scores of the current tile, base-2 exponent units
int rowOf[ROWS];

int L, S, DK, DV, flags, shift, b, h, hk, keyLen;

// tileScores fills s for keys j0 .. j0+KEY_TILE-1; a key that is out of range
// or masked gets -inf.
void tileScores(int j0, int keyEnd) {
    for (int t = 0; t < KEY_TILE; t++) {
        int j = min(j0 + t, S - 1); // clamp so loads stay in bounds; masked below
        int kBase = P.offsets.y + b * P.kStride.x + hk * P.kStride.y + j * P.kStride.z;
        for (int r = 0; r < ROWS; r++) {
            s[r * KEY_TILE + t] = 0.0;
        }
        for (int i = 0; i < D_MAX; i++) {
            if (i < DK) {
                float kv = LOAD_K(kBase + i);
                for (int r = 0; r < ROWS; r++) {
                    s[r * KEY_TILE + t] += q[r * D_MAX + i] * kv;
                }
            }
        }
    }
    for (int r = 0; r < ROWS; r++) {
        int row = rowOf[r];
        for (int t = 0; t < KEY_TILE; t++) {
            int j = j0 + t;
            bool ok = j < keyEnd;
            if ((flags & FLAG_CAUSAL) != 0) {
                ok = ok && j <= row + shift;
            }
            int jc = min(j, S - 1);
            float add = 0.0;
            if ((flags & FLAG_MASK) != 0) {
                add += LOAD_M(b * P.mStride.x + h * P.mStride.y + row * P.mStride.z + jc * P.mStride.w);
            }
            if ((flags & FLAG_BOOLMASK) != 0) {
                add += LOAD_B(b * P.bStride.x + h * P.bStride.y + row * P.bStride.z + jc * P.bStride.w);
            }
            float e = s[r * KEY_TILE + t] + add * LOG2E;
            s[r * KEY_TILE + t] = (ok && e != NEG_INF) ? e : NEG_INF;
        }
    }
}

void main() {
    L = P.dims.x;
    S = P.dims.y;
    DK = P.dims.z;
    DV = P.dims.w;
    int B = P.heads.x;
    flags = P.heads.z;
    shift = P.heads.w;
    h = int(gl_WorkGroupID.y);
    b = int(gl_WorkGroupID.z);
    hk = h / P.heads.y;
    int lane = int(gl_LocalInvocationID.x);
    int rowBase = int(gl_WorkGroupID.x) * ROWS * WG;

    keyLen = S;
    int queryLen = L;
    if ((flags & FLAG_LENGTHS) != 0) {
        keyLen = lengths[b];
        queryLen = lengths[B + b];
    }
    // The key loop bound is the same for the whole workgroup (uniform control
    // flow keeps lavapipe fast); rows that must see fewer keys mask them.
    int keyEnd = keyLen;
    if ((flags & FLAG_CAUSAL) != 0) {
        int lastRow = min(L, rowBase + ROWS * WG) - 1;
        keyEnd = clamp(lastRow + shift + 1, 0, keyLen);
    }

    float scale2 = P.scaling.x;
    for (int r = 0; r < ROWS; r++) {
        rowOf[r] = min(rowBase + r * WG + lane, L - 1);
        int qBase = P.offsets.x + b * P.qStride.x + h * P.qStride.y + rowOf[r] * P.qStride.z;
        for (int i = 0; i < D_MAX; i++) {
            q[r * D_MAX + i] = i < DK ? LOAD_Q(qBase + i) * scale2 : 0.0;
            acc[r * D_MAX + i] = 0.0;
        }
    }
    float m[ROWS];
    float l[ROWS];
    for (int r = 0; r < ROWS; r++) {
        m[r] = NEG_INF;
        l[r] = 0.0;
    }

    for (int j0 = 0; j0 < keyEnd; j0 += KEY_TILE) {
        tileScores(j0, keyEnd);
        for (int r = 0; r < ROWS; r++) {
            float tileMax = NEG_INF;
            for (int t = 0; t < KEY_TILE; t++) {
                tileMax = max(tileMax, s[r * KEY_TILE + t]);
            }
            float mNew = max(m[r], tileMax);
            // While every key so far is masked mNew is -inf: keep alpha 1 and
            // p 0 instead of computing exp2(-inf - -inf) = NaN.
            float alpha = mNew == NEG_INF ? 1.0 : exp2(m[r] - mNew);
            float sum = 0.0;
            for (int t = 0; t < KEY_TILE; t++) {
                float e = s[r * KEY_TILE + t];
                float p = e == NEG_INF ? 0.0 : exp2(e - mNew);
                s[r * KEY_TILE + t] = p;
                sum += p;
            }
            l[r] = l[r] * alpha + sum;
            m[r] = mNew;
            for (int i = 0; i < D_MAX; i++) {
                acc[r * D_MAX + i] *= alpha;
            }
        }
        for (int t = 0; t < KEY_TILE; t++) {
            int j = min(j0 + t, S - 1);
            int vBase = P.offsets.z + b * P.vStride.x + hk * P.vStride.y + j * P.vStride.z;
            for (int i = 0; i < D_MAX; i++) {
                if (i < DV) {
                    float vv = LOAD_V(vBase + i);
                    for (int r = 0; r < ROWS; r++) {
                        acc[r * D_MAX + i] += s[r * KEY_TILE + t] * vv;
                    }
                }
            }
        }
    }

    for (int r = 0; r < ROWS; r++) {
        int row = rowBase + r * WG + lane;
        if (row >= L) {
            continue;
        }
        // A padded query row or a row with no visible key has no softmax:
        // vkattn defines its output as zeros and its log-sum-exp as -inf.
        bool live = row < queryLen && l[r] > 0.0;
        float inv = live ? 1.0 / l[r] : 0.0;
        int oBase = P.offsets.w + b * P.oStride.x + h * P.oStride.y + row * P.oStride.z;
        for (int i = 0; i < DV; i++) {
            oData[oBase + i] = acc[r * D_MAX + i] * inv;
        }
        int lseIndex = (b * int(gl_NumWorkGroups.y) + h) * L + row;
        if ((flags & FLAG_LSE) != 0) {
            lseData[lseIndex] = live ? (m[r] + log2(l[r])) * LN2 : NEG_INF;
        }
        if (!live) {
            l[r] = 0.0;
        }
    }

    if ((flags & FLAG_WEIGHTS) != 0) {
        // Second pass for the optional (B,H,L,S) weights: recompute each
        // tile's scores and normalise with the final max and sum.
        for (int j0 = 0; j0 < S; j0 += KEY_TILE) {
            tileScores(j0, keyLen);
            for (int r = 0; r < ROWS; r++) {
                int row = rowBase + r * WG + lane;
                if (row >= L) {
                    continue;
                }
                int wBase = ((b * int(gl_NumWorkGroups.y) + h) * L + row) * S;
                for (int t = 0; t < KEY_TILE; t++) {
                    int j = j0 + t;
                    float e = s[r * KEY_TILE + t];
                    if (j < S) {
                        wData[wBase + j] = (l[r] > 0.0 && e != NEG_INF) ? exp2(e - m[r]) / l[r] : 0.0;
                    }
                }
            }
        }
    }
}
