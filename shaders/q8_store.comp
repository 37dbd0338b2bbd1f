#version 450
#extension GL_GOOGLE_include_directive : require
// Quantizes rows of X (any float type, any strides) into a tensor of the
// quantized type Y_TYPE (SEMANTICS.md §9.2), exactly as ggml's
// quantize_row_q8_0, quantize_row_q4_0_ref and quantize_row_iq4_nl_ref
// do, on the device:
// AppendTensors into a quantized KV cache. One invocation per block of
// 32 (QUANT_BLOCK), by the function of this file that core.QuantTypes
// names for the type (elements.glsl's STORE_QUANT_BLOCK): source row r (of (B, heads, N) rows of width
// D) goes to element rowDst[r] of Y, whose quants are its first bytes (a
// byte each for q8_0, two a byte in ggml's order for q4_0) and whose
// float16 scales start at half P.scales.
//
// Every step is rounded as in float32 C: d = amax / 127 (q8_0) and
// id = 1 / d correctly rounded (GLSL's division is not: the quotient is
// corrected with exact residuals), q4_0's d = max / -8 exact (a power of
// two; below float32's normal range id is 0 anyway), the product x * id
// and q4_0's sum with 8.5 each rounded once (precise: never contracted),
// roundf halves away from zero, and d rounded to float16 to nearest even
// with subnormals, in integer arithmetic.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push {
    int heads;    // rows are (B, heads, N)
    int N;
    int D;        // row width, a multiple of the block
    int xOffset;  // X's element offset and strides over (B, heads, N)
    int xStrideB;
    int xStrideH;
    int xStrideN;
    int blocks;   // B * heads * N * D / 32
    int scales;   // Y's first scale, in halves
    int rowPitch; // invocations per row of the dispatch grid
} P;

#include "loads.glsl"
INPUT(QBIND_X, Xt)
#define Xt_SCALES 0 // never quantized
layout(constant_id = SPEC_X_TYPE) const int X_TYPE = 0;
layout(constant_id = SPEC_Y_TYPE) const int Y_TYPE = TYPE_Q8_0;
layout(std430, binding = QBIND_Y) buffer YBuf { uint y[]; };
layout(std430, binding = QBIND_ROWS) readonly buffer RowsBuf { int rowDst[]; };
// status[0] gets 1 where a block's scale rounds past float16's largest
// finite value (the scale is then clamped to it): the host refuses the
// append, as it refuses such a block of its own (SEMANTICS.md §9.2).
layout(std430, binding = QBIND_STATUS) buffer StatusBuf { uint status[]; };

// The error a - c d for c near a / d: Dekker's exact product of c and d
// (Veltkamp halves, no fused operations), then a - p exactly (p is within
// a factor 2 of a).
float errDiv(float a, float c, float d) {
    precise float p = c * d;
    precise float cs = c * 4097.0;
    precise float ch = cs - (cs - c);
    precise float cl = c - ch;
    precise float ds = d * 4097.0;
    precise float dh = ds - (ds - d);
    precise float dl = d - dh;
    precise float e = ((ch * dh - p) + ch * dl + cl * dh) + cl * dl;
    precise float r = (a - p) - e;
    return r;
}

// a / d rounded to nearest (a float32 quotient is never a tie): the
// candidate within 3 ulps of the device's quotient (Vulkan asks 2.5 ulps
// of division) with the least exact error, as the host's division gives.
float divide(float a, float d) {
    float c = a / d;
    float best = c;
    float bestErr = abs(errDiv(a, c, d));
    for (int k = -3; k <= 3; k++) {
        float x = uintBitsToFloat(uint(int(floatBitsToUint(c)) + k));
        float e = abs(errDiv(a, x, d));
        if (e < bestErr) {
            best = x;
            bestErr = e;
        }
    }
    return best;
}

float div127(float a) { return divide(a, 127.0); }
float recip(float d) { return divide(1.0, d); }

// The float16 bits nearest to x >= 0 (ties to even, subnormals kept).
uint toF16(float x) {
    uint b = floatBitsToUint(x);
    int e = int(b >> 23) - 127;
    uint m = (b & 0x7fffffu) | 0x800000u; // 24 significant bits
    if (x == 0.0 || e < -25) {
        return 0u;
    }
    // Keep 11 bits (normal) or fewer (subnormal: below 2^-14).
    int drop = e >= -14 ? 13 : 13 + (-14 - e);
    uint kept = m >> drop;
    uint rest = m & ((1u << drop) - 1u);
    uint half_ = 1u << (drop - 1);
    if (rest > half_ || (rest == half_ && (kept & 1u) == 1u)) {
        kept++;
    }
    if (e >= -14) {
        // kept has 11 bits (12 if rounding carried: the exponent grows).
        // Beyond float16's range: the largest finite scale, and the
        // status that makes the host refuse the append (SEMANTICS.md §9.2).
        uint h = (uint(e + 15) << 10) + (kept - 0x400u);
        if (h > 0x7bffu) {
            atomicOr(status[0], 1u);
        }
        return min(h, 0x7bffu);
    }
    return kept; // a subnormal, or the smallest normal if it carried
}

float roundHalfAway(float v) {
    float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

// Sets the float16 scale h of Y's block blk: two blocks share a scale
// word, each sets its own half.
void storeScale(int blk, uint h) {
    int hIdx = P.scales + blk;
    uint shift = uint(hIdx & 1) * 16u;
    atomicAnd(y[hIdx >> 1], ~(0xffffu << shift));
    atomicOr(y[hIdx >> 1], h << shift);
}

// ggml's q4_0 quant of x: min(15, trunc(x * id + 8.5)), the product and
// the sum each rounded to float32. The sum is at least 0.5 but for the
// rounding of id, so the truncation is never below 0.
uint q4Quant(float x, float id) {
    precise float p = x * id;
    precise float s = p + 8.5;
    return uint(min(15, int(s)));
}

// The q4_0 block of the 32 elements of X from base, to element dst of Y.
void quantizeQ4_0(int base, int dst) {
    // max: the first element of largest |x|, its sign kept (+0 when all
    // are zeros).
    float amax = 0.0;
    float top = 0.0;
    for (int i = 0; i < QUANT_BLOCK; i++) {
        float x = AT(Xt, X_TYPE, base + i);
        if (amax < abs(x)) {
            amax = abs(x);
            top = x;
        }
    }
    // d = max / -8: magnitude amax / 8, exact for a normal result; the
    // opposite sign of max, and -0 for a block of zeros (max +0).
    float dAbs = amax * 0.125;
    bool dNeg = !(top < 0.0);
    // A d below float32's normal range has the float16 scale 0; its
    // quants are 8 (ggml's 1/d is then huge or infinite).
    float idAbs = dAbs < 1.17549435e-38 ? 0.0 : recip(dAbs);
    float id = dNeg ? -idAbs : idAbs;
    for (int w = 0; w < QUANT_BLOCK / 8; w++) {
        uint word = 0u;
        for (int j = 0; j < 4; j++) {
            uint lo = q4Quant(AT(Xt, X_TYPE, base + 4 * w + j), id);
            uint hi = q4Quant(AT(Xt, X_TYPE, base + 4 * w + j + QUANT_BLOCK / 2), id);
            word |= (lo | (hi << 4)) << (8 * j);
        }
        y[(dst >> 3) + w] = word; // dst is a multiple of QUANT_BLOCK: whole words
    }
    storeScale(dst >> QUANT_BLOCK_SHIFT, toF16(dAbs) | (dNeg ? 0x8000u : 0u));
}

// The iq4_nl index of v: the level nearest to v, the upper of two equally
// near (2v against the sum of two levels: both exact).
uint iq4nlIndex(float v) {
    uint l = 0u;
    for (int i = 1; i < 16; i++) {
        if (2.0 * v >= level_iq4_nl(uint(i - 1)) + level_iq4_nl(uint(i))) {
            l = uint(i);
        }
    }
    return l;
}

// The iq4_nl block of the 32 elements of X from base, to element dst of
// Y, as ggml's quantize_row_iq4_nl_ref (core.QuantizeIQ4NL says each
// step): d = max / -127 and id = 1 / d correctly rounded, each index the
// level nearest to id * x, sumqx and sumq2 summed in element order with
// every product rounded once (precise), and the scale sumqx / sumq2
// correctly rounded. The scale's sign is d's (the largest element's term
// outweighs the rest of both sums), set apart from its magnitude so a
// driver that flushes subnormal products to zero still writes the sign
// of a scale whose float16 is zero.
void quantizeIQ4_NL(int base, int dst) {
    float amax = 0.0;
    float top = 0.0;
    for (int i = 0; i < QUANT_BLOCK; i++) {
        float x = AT(Xt, X_TYPE, base + i);
        if (abs(x) > amax) {
            amax = abs(x);
            top = x;
        }
    }
    uint idx[QUANT_BLOCK];
    float scale = 0.0;
    bool negative = false;
    for (int i = 0; i < QUANT_BLOCK; i++) {
        idx[i] = 0u;
    }
    if (amax >= 1e-15) { // ggml's GROUP_MAX_EPS; below it the scale is 0
        negative = top > 0.0; // d = max / -127
        float dAbs = div127(amax);
        float d = negative ? -dAbs : dAbs;
        float id = recip(d);
        precise float sumqx = 0.0;
        precise float sumq2 = 0.0;
        for (int i = 0; i < QUANT_BLOCK; i++) {
            float x = AT(Xt, X_TYPE, base + i);
            precise float v = id * x;
            idx[i] = iq4nlIndex(v);
            float q = level_iq4_nl(idx[i]);
            precise float w = x * x;
            precise float wq = w * q;
            precise float tx = wq * x;
            precise float tq = wq * q;
            sumqx = sumqx + tx;
            sumq2 = sumq2 + tq;
        }
        scale = sumq2 > 0.0 ? abs(divide(sumqx, sumq2)) : 0.0;
    }
    for (int w = 0; w < QUANT_BLOCK / 8; w++) {
        uint word = 0u;
        for (int j = 0; j < 4; j++) {
            word |= (idx[4 * w + j] | (idx[4 * w + j + QUANT_BLOCK / 2] << 4)) << (8 * j);
        }
        y[(dst >> 3) + w] = word; // dst is a multiple of QUANT_BLOCK: whole words
    }
    storeScale(dst >> QUANT_BLOCK_SHIFT, toF16(scale) | (negative ? 0x8000u : 0u));
}

// The q8_0 block of the 32 elements of X from base, to element dst of Y.
void quantizeQ8_0(int base, int dst) {
    float amax = 0.0;
    for (int i = 0; i < QUANT_BLOCK; i++) {
        amax = max(amax, abs(AT(Xt, X_TYPE, base + i)));
    }
    float d = amax == 0.0 ? 0.0 : div127(amax);
    // A d below float32's normal range has the float16 scale 0; its
    // quants are 0 (ggml's 1/d is then huge or infinite).
    float id = d < 1.17549435e-38 ? 0.0 : recip(d);
    for (int w = 0; w < QUANT_BLOCK / 4; w++) {
        uint word = 0u;
        for (int j = 0; j < 4; j++) {
            precise float v = AT(Xt, X_TYPE, base + 4 * w + j) * id;
            int q = int(roundHalfAway(v));
            word |= uint(q & 0xff) << (8 * j);
        }
        y[(dst >> 2) + w] = word; // dst is a multiple of QUANT_BLOCK: whole words
    }
    storeScale(dst >> QUANT_BLOCK_SHIFT, toF16(d));
}

void main() {
    int blk = int(gl_GlobalInvocationID.x) + int(gl_GlobalInvocationID.y) * P.rowPitch;
    if (blk >= P.blocks) {
        return;
    }
    int perRow = P.D / QUANT_BLOCK;
    int row = blk / perRow;
    int first = (blk % perRow) * QUANT_BLOCK;
    int t = row % P.N;
    int h = (row / P.N) % P.heads;
    int b = row / (P.N * P.heads);
    int base = P.xOffset + b * P.xStrideB + h * P.xStrideH + t * P.xStrideN + first;
    // elements.glsl's dispatch: the quantizer core.QuantTypes names for Y_TYPE.
    STORE_QUANT_BLOCK(Y_TYPE, base, rowDst[row] + first)
}
