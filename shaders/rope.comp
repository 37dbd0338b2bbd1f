#version 450
#extension GL_GOOGLE_include_directive : require
// Rotary position embedding (SEMANTICS.md §5): rows of X (any element
// type, any strides) rotated into dense float32 rows of Y. The first ROT
// elements of a row turn in pairs by the angles of the row's position,
// whose cos and sin the host computed in float64 and rounded to float32:
// the table TABLE holds (cos, sin) for each of ROT/2 frequencies per table
// row. Elements past ROT are copied. One invocation per output element.
//
// Table rows: a call's own table has one per (batch item, row), row
// b * N + t (FROM_LENGTHS off); a KV cache's has one per position, and
// the queries of a call over it sit at t + lengths[b] - N (FROM_LENGTHS
// on), read when the call runs.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push {
    int heads;    // rows are (B, heads, N)
    int N;        // rows per head
    int D;        // row width
    int ROT;      // rotated elements, even
    int interleaved; // pairs (2i, 2i+1), else (i, i + ROT/2)
    int fromLengths;
    int xOffset;  // X's element offset and strides over (B, heads, N)
    int xStrideB;
    int xStrideH;
    int xStrideN;
    int total;    // B * heads * N * D
    int rowPitch; // invocations per row of the dispatch grid
} P;

#include "loads.glsl"
INPUT(RBIND_X, Xt)
#define Xt_SCALES 0 // never q8_0
layout(constant_id = SPEC_X_TYPE) const int X_TYPE = 0;
layout(std430, binding = RBIND_Y) writeonly buffer YBuf { float y[]; };
layout(std430, binding = RBIND_TABLE) readonly buffer TableBuf { float table[]; };
layout(std430, binding = RBIND_LENGTHS) readonly buffer LengthsBuf { int lengths[]; };

float x(int base, int e) { return AT(Xt, X_TYPE, base + e); }

void main() {
    int i = int(gl_GlobalInvocationID.x) + int(gl_GlobalInvocationID.y) * P.rowPitch;
    if (i >= P.total) {
        return;
    }
    int e = i % P.D;
    int row = i / P.D;
    int t = row % P.N;
    int b = row / (P.N * P.heads);
    int h = (row / P.N) % P.heads;
    int base = P.xOffset + b * P.xStrideB + h * P.xStrideH + t * P.xStrideN;
    float v = x(base, e);
    if (e < P.ROT) {
        int half_ = P.ROT / 2;
        int pair, partner;
        bool first;
        if (P.interleaved != 0) {
            pair = e >> 1;
            first = (e & 1) == 0;
            partner = first ? e + 1 : e - 1;
        } else {
            first = e < half_;
            pair = first ? e : e - half_;
            partner = first ? e + half_ : e - half_;
        }
        int trow = P.fromLengths != 0 ? t + lengths[b] - P.N : b * P.N + t;
        int at = 2 * (trow * half_ + pair);
        float c = table[at], s = table[at + 1];
        float w = x(base, partner);
        v = first ? v * c - w * s : v * c + w * s;
    }
    y[i] = v;
}
