#version 450
#extension GL_GOOGLE_include_directive : require
// Merge of partial attentions (SEMANTICS.md §7.1): parts i, each the
// attention of the same query rows over its own keys, as (O_i normalised
// within the part, LSE_i), become the attention over all their keys:
//
//     M = max_i LSE_i     s = sum_i exp(LSE_i - M)     LSE = M + ln s
//     O = sum_i (exp(LSE_i - M) / s) O_i
//
// The host dispatches four passes, each a barrier from the next: pass 0
// (one invocation per row, once per part) takes the running maximum M
// into the LSE buffer; pass 1 (per row, per part) sums exp(LSE_i - M);
// pass 2 (per element, per part) adds each part's share to O; pass 3 (per
// row, once) turns M into LSE. Both sums are compensated (Kahan): each
// keeps the rounding error of its additions beside it and feeds it back,
// so the merged values are within a few float32 roundings of the exact
// merge whatever the number of parts, where a plain running sum drifts by
// a rounding per part. The first part of each pass writes instead of
// adding, so nothing needs clearing. A part whose row has LSE_i = -inf
// (no visible key) adds nothing; a row where every part has -inf gets
// LSE -inf and O = 0. Each invocation reads and writes only its own row
// or element.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push {
    int pass;      // 0: maximum; 1: row sums; 2: O; 3: LSE from maximum and sum
    int first;     // the first part of the pass: write instead of adding
    int heads;     // rows are (B, heads, L)
    int L;
    int DV;
    int total;     // rows (passes 0, 1, 3) or elements (pass 2)
    int rowPitch;  // invocations per row of the dispatch grid
    int oOffset;   // the part's O: element offset and strides over (B, heads, L)
    int oStrideB;
    int oStrideH;
    int oStrideL;
    int lseOffset; // the part's LSE, likewise
    int lseStrideB;
    int lseStrideH;
    int lseStrideL;
} P;

layout(std430, binding = MBIND_PART_O) readonly buffer PartO { float partO[]; };
layout(std430, binding = MBIND_PART_LSE) readonly buffer PartLSE { float partLSE[]; };
layout(std430, binding = MBIND_O) buffer OBuf { float o[]; };     // dense (B, heads, L, DV)
layout(std430, binding = MBIND_LSE) buffer LseBuf { float lse[]; }; // dense (B, heads, L): M, then LSE
// sums[2*row] and sums[2*row+1]: s and its compensation; then, from
// 2*rows, each element of O's compensation.
layout(std430, binding = MBIND_SUMS) buffer SumBuf { float sums[]; };

const float NEG_INF = -1.0 / 0.0;

int partRow(int row, int offset, int strideB, int strideH, int strideL) {
    int t = row % P.L;
    int h = (row / P.L) % P.heads;
    int b = row / (P.L * P.heads);
    return offset + b * strideB + h * strideH + t * strideL;
}

// addCompensated returns sum + v, with c the compensation that the sum
// carries (updated): precise keeps the compiler from folding
// (t - sum) - y to 0.
float addCompensated(float sum, inout float c, float v) {
    precise float y = v - c;
    precise float t = sum + y;
    c = (t - sum) - y;
    return t;
}

void main() {
    int i = int(gl_GlobalInvocationID.x) + int(gl_GlobalInvocationID.y) * P.rowPitch;
    if (i >= P.total) {
        return;
    }
    int rows = P.pass == 2 ? P.total / P.DV : P.total;
    int row = P.pass == 2 ? i / P.DV : i;
    if (P.pass == 3) {
        float m = lse[row];
        lse[row] = m == NEG_INF ? NEG_INF : m + log(sums[2 * row]);
        return;
    }
    float x = partLSE[partRow(row, P.lseOffset, P.lseStrideB, P.lseStrideH, P.lseStrideL)];
    if (P.pass == 0) {
        lse[row] = P.first != 0 ? x : max(lse[row], x);
        return;
    }
    float m = lse[row];
    float w = x == NEG_INF ? 0.0 : exp(x - m);
    if (P.pass == 1) {
        float c = P.first != 0 ? 0.0 : sums[2 * row + 1];
        sums[2 * row] = P.first != 0 ? w : addCompensated(sums[2 * row], c, w);
        sums[2 * row + 1] = c;
        return;
    }
    float s = sums[2 * row];
    float v = m == NEG_INF ? 0.0 : (w / s) * partO[partRow(row, P.oOffset, P.oStrideB, P.oStrideH, P.oStrideL) + i - row * P.DV];
    int at = 2 * rows + i; // o[i]'s compensation
    float c = P.first != 0 ? 0.0 : sums[at];
    o[i] = P.first != 0 ? v : addCompensated(o[i], c, v);
    sums[at] = c;
}
