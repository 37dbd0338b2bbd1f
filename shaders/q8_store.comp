#version 450
#extension GL_GOOGLE_include_directive : require
// Quantizes rows of X (any float type, any strides) into a q8_0 tensor
// (SEMANTICS.md §8.2), exactly as ggml's quantize_row_q8_0 does, on the
// device: AppendTensors into a q8_0 KV cache. One invocation per block
// of Q8_BLOCK (32): source row r (of (B, heads, N) rows of width D) goes to element
// rowDst[r] of Y, whose quants are its bytes and whose float16 scales
// start at half P.scales.
//
// Every step is rounded as in float32 C: d = amax / 127 and id = 1 / d
// correctly rounded (GLSL's division is not: the quotient is corrected
// with exact residuals), the product x * id rounded once (precise: never
// contracted), roundf halves away from zero, and d rounded to float16 to
// nearest even with subnormals, in integer arithmetic.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push {
    int heads;    // rows are (B, heads, N)
    int N;
    int D;        // row width, a multiple of Q8_BLOCK
    int xOffset;  // X's element offset and strides over (B, heads, N)
    int xStrideB;
    int xStrideH;
    int xStrideN;
    int blocks;   // B * heads * N * D / Q8_BLOCK
    int scales;   // Y's first scale, in halves
    int rowPitch; // invocations per row of the dispatch grid
} P;

#include "loads.glsl"
INPUT(QBIND_X, Xt)
#define Xt_SCALES 0 // never q8_0
layout(constant_id = Q8_SPEC_X_TYPE) const int X_TYPE = 0;
layout(std430, binding = QBIND_Y) buffer YBuf { uint y[]; };
layout(std430, binding = QBIND_ROWS) readonly buffer RowsBuf { int rowDst[]; };

// The error a - 127 c, exactly, for c near a / 127: a - 128c and then
// adding c back are exact (Sterbenz: each pair is within a factor 2).
float err127(float a, float c) {
    precise float r = a - c * 128.0;
    precise float e = r + c;
    return e;
}

// a / 127 rounded to nearest: the candidate with the least exact error.
float div127(float a) {
    float c = a / 127.0;
    float best = c;
    float bestErr = abs(err127(a, c));
    for (int k = -3; k <= 3; k++) {
        float x = uintBitsToFloat(uint(int(floatBitsToUint(c)) + k));
        float e = abs(err127(a, x));
        if (e < bestErr) {
            best = x;
            bestErr = e;
        }
    }
    return best;
}

// The error 1 - c d for c near 1 / d: Dekker's exact product of c and d
// (Veltkamp halves, no fused operations), then 1 - p exactly.
float errRecip(float c, float d) {
    precise float p = c * d;
    precise float cs = c * 4097.0;
    precise float ch = cs - (cs - c);
    precise float cl = c - ch;
    precise float ds = d * 4097.0;
    precise float dh = ds - (ds - d);
    precise float dl = d - dh;
    precise float e = ((ch * dh - p) + ch * dl + cl * dh) + cl * dl;
    precise float r = (1.0 - p) - e;
    return r;
}

// 1 / d rounded to nearest.
float recip(float d) {
    float c = 1.0 / d;
    float best = c;
    float bestErr = abs(errRecip(c, d));
    for (int k = -3; k <= 3; k++) {
        float x = uintBitsToFloat(uint(int(floatBitsToUint(c)) + k));
        float e = abs(errRecip(x, d));
        if (e < bestErr) {
            best = x;
            bestErr = e;
        }
    }
    return best;
}

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
        // Beyond float16's range the largest finite scale (SEMANTICS.md
        // §8.2: the host refuses such blocks, the device saturates).
        return min((uint(e + 15) << 10) + (kept - 0x400u), 0x7bffu);
    }
    return kept; // a subnormal, or the smallest normal if it carried
}

float roundHalfAway(float v) {
    float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

void main() {
    int blk = int(gl_GlobalInvocationID.x) + int(gl_GlobalInvocationID.y) * P.rowPitch;
    if (blk >= P.blocks) {
        return;
    }
    int perRow = P.D / Q8_BLOCK;
    int row = blk / perRow;
    int first = (blk % perRow) * Q8_BLOCK;
    int t = row % P.N;
    int h = (row / P.N) % P.heads;
    int b = row / (P.N * P.heads);
    int base = P.xOffset + b * P.xStrideB + h * P.xStrideH + t * P.xStrideN + first;
    float amax = 0.0;
    for (int i = 0; i < Q8_BLOCK; i++) {
        amax = max(amax, abs(AT(Xt, X_TYPE, base + i)));
    }
    float d = amax == 0.0 ? 0.0 : div127(amax);
    // A d below float32's normal range has the float16 scale 0; its
    // quants are 0 (ggml's 1/d is then huge or infinite).
    float id = d < 1.17549435e-38 ? 0.0 : recip(d);
    int dst = rowDst[row] + first; // a multiple of Q8_BLOCK: whole words
    for (int w = 0; w < Q8_BLOCK / 4; w++) {
        uint word = 0u;
        for (int j = 0; j < 4; j++) {
            precise float v = AT(Xt, X_TYPE, base + 4 * w + j) * id;
            int q = int(roundHalfAway(v));
            word |= uint(q & 0xff) << (8 * j);
        }
        y[(dst >> 2) + w] = word;
    }
    // Two blocks share a scale word: each sets its own half.
    int hIdx = P.scales + (dst >> Q8_BLOCK_SHIFT);
    uint shift = uint(hIdx & 1) * 16u;
    atomicAnd(y[hIdx >> 1], ~(0xffffu << shift));
    atomicOr(y[hIdx >> 1], toF16(d) << shift);
}
