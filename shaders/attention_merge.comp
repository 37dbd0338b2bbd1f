#version 450
#extension GL_GOOGLE_include_directive : require
// Merge of partial attentions (SEMANTICS.md §21): parts i, each the
// attention of the same query rows over its own keys, as (O_i normalised
// within the part, LSE_i), become the attention over all their keys:
//
//     LSE = ln sum_i exp(LSE_i)      O = sum_i exp(LSE_i - LSE) O_i
//
// The host dispatches this kernel twice per part: first every part's
// LSE pass (one invocation per row) builds LSE into the output's LSE
// buffer, then every part's O pass (one invocation per element) adds the
// part's share to the output. The first part of each pass writes instead
// of adding, so the outputs need no clearing. A part whose row has
// LSE_i = -inf (no visible key) adds nothing; a row where every part has
// -inf stays -inf with O = 0. Each invocation reads and writes only its
// own output element, and the passes are separated by barriers.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push {
    int pass;      // 0: the part's LSE into the running LSE; 1: its share of O
    int first;     // the first part of the pass: write instead of adding
    int heads;     // rows are (B, heads, L)
    int L;
    int DV;
    int total;     // rows (pass 0) or elements (pass 1)
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
layout(std430, binding = MBIND_LSE) buffer LseBuf { float lse[]; }; // dense (B, heads, L)

const float NEG_INF = -1.0 / 0.0;

// partRow is the element offset of row `row` of a part's tensor.
int partRow(int row, int offset, int strideB, int strideH, int strideL) {
    int t = row % P.L;
    int h = (row / P.L) % P.heads;
    int b = row / (P.L * P.heads);
    return offset + b * strideB + h * strideH + t * strideL;
}

void main() {
    int i = int(gl_GlobalInvocationID.x) + int(gl_GlobalInvocationID.y) * P.rowPitch;
    if (i >= P.total) {
        return;
    }
    int row = P.pass == 0 ? i : i / P.DV;
    float x = partLSE[partRow(row, P.lseOffset, P.lseStrideB, P.lseStrideH, P.lseStrideL)];
    if (P.pass == 0) {
        if (P.first != 0) {
            lse[row] = x;
            return;
        }
        float a = lse[row];
        float m = max(a, x);
        // exp(-inf - m) is 0: a part with no visible key adds nothing.
        lse[row] = m == NEG_INF ? NEG_INF : m + log(exp(a - m) + exp(x - m));
        return;
    }
    int e = i - row * P.DV;
    // O_i is finite (checked on the host), so a weight of 0 adds 0.
    float w = x == NEG_INF ? 0.0 : exp(x - lse[row]);
    float v = w * partO[partRow(row, P.oOffset, P.oStrideB, P.oStrideH, P.oStrideL) + e];
    o[i] = P.first != 0 ? v : o[i] + v;
}
