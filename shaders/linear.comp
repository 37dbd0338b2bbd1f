#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// Dense layer Y = X W^T + b, computed in fp32 (PyTorch nn.Linear layout: W is
// (outputs, inputs) row-major, so each output is a dot product of two
// contiguous rows). Each invocation computes a TR x TC tile of Y, reading
// four inputs of TR rows of X and TC rows of W per step, so every loaded
// vec4 feeds TR or TC dot products.
//
// X and Y are row views (element offset and row stride), so a projection can
// read or write one slice of a wider buffer: the fused QKV output (B*T, 3d)
// holds Q, K and V side by side and attention reads heads out of it through
// strides. The tile arrays are indexed only inside unrolled loops (see
// attention.comp on lavapipe and private arrays).
//
// Variants: TEXEL_LOADS / VEC4_LOADS as in loads.glsl, for X and W.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

const int TR = 4; // rows of X per invocation
const int TC = 4; // outputs per invocation

#include "linear_params.glsl"

#include "loads.glsl"
INPUT(LBIND_X, Xt)
INPUT(LBIND_W, Wt)
#define Xt_SCALES 0 // never q8_0
#define Wt_SCALES 0
// Element types of X and W (TYPE_F32, TYPE_F16, TYPE_BF16 of interface.glsl):
// weights are read in the type they were stored in.
layout(constant_id = SPEC_X_TYPE) const int X_TYPE = 0;
layout(constant_id = SPEC_W_TYPE) const int W_TYPE = 0;
layout(std430, binding = LBIND_BIAS) readonly buffer BiasBuf { float bias[]; };
layout(std430, binding = LBIND_Y) writeonly buffer YBuf { float yData[]; };

void main() {
    int M = P.dims.x;
    int N = P.dims.y;
    int K = P.dims.z;
    int col0 = int(gl_GlobalInvocationID.x) * TC;
    int row0 = int(gl_WorkGroupID.y) * TR;
    if (col0 >= N) {
        return;
    }
    // Rows and outputs past the end are clamped for loading and not stored.
    int xBase[TR];
    int wBase[TC];
    vec4 acc[TR]; // acc[r][c]: row row0+r, output col0+c
    [[unroll]] for (int r = 0; r < TR; r++) {
        xBase[r] = P.x.x + min(row0 + r, M - 1) * P.x.y;
        acc[r] = vec4(0.0);
    }
    [[unroll]] for (int c = 0; c < TC; c++) {
        wBase[c] = P.w.x + min(col0 + c, N - 1) * P.w.y;
    }
    int steps = (K + 3) / 4;
    // Lane j walks the inputs from its j-th step, wrapping around: weight
    // rows of the lanes' outputs start a multiple of 1 KiB apart (256
    // inputs), and read in step they fall in the same few L1 sets, which
    // 16 lanes (lavapipe at 512 bits) overfill.
    int rot = int(gl_LocalInvocationID.x) % steps;
    for (int i0 = 0; i0 < steps; i0++) {
        int i = i0 + rot - (i0 + rot >= steps ? steps : 0);
        vec4 xs[TR];
        vec4 ws[TC];
        [[unroll]] for (int r = 0; r < TR; r++) {
            xs[r] = LOAD4(Xt, X_TYPE, xBase[r], i, K);
        }
        [[unroll]] for (int c = 0; c < TC; c++) {
            ws[c] = LOAD4(Wt, W_TYPE, wBase[c], i, K);
        }
        [[unroll]] for (int r = 0; r < TR; r++) {
            [[unroll]] for (int c = 0; c < TC; c++) {
                acc[r][c] += dot(xs[r], ws[c]);
            }
        }
    }
    vec4 b = vec4(0.0);
    if ((P.dims.w & LFLAG_BIAS) != 0) {
        [[unroll]] for (int c = 0; c < TC; c++) {
            b[c] = bias[P.y.z + min(col0 + c, N - 1)];
        }
    }
    [[unroll]] for (int r = 0; r < TR; r++) {
        if (row0 + r < M) {
            int yBase = P.y.x + (row0 + r) * P.y.y + col0;
            [[unroll]] for (int c = 0; c < TC; c++) {
                if (col0 + c < N) {
                    yData[yBase + c] = acc[r][c] + b[c];
                }
            }
        }
    }
}
