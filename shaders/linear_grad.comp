#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// The products of the dense layers' backward pass, computed in fp32:
//
//   C[m, n] (+)= sum_k A[m, k] B[n, k]
//
// for Y = X W^T + b with upstream gradient dY: dX = dY W (A = dY read along
// its rows, B = W read down its columns) and dW = dY^T X (A = dY and B = X,
// both read down their columns, the sum over the tokens). Unlike
// linear.comp, whose operands are contiguous along the sum, B is
// contiguous along n, and A along k or, with GFLAG_A_ROWS, along m; either
// way a step reads a 4 x 4 block of each operand (four vec4s) and adds
// their 16 outer products to an invocation's TR x TC tile of C, in k
// order: the sums are the same bits run to run (no atomics).
//
// Element (r, k) of an operand lies at its offset plus r times its row
// stride plus k times its k stride, one of them 1: a.y / b.y hold the
// other. Rows past M or N and sums past K read zero (indexes are clamped
// into the operand, then the value dropped). GFLAG_ACCUMULATE adds
// to C instead of overwriting it (a sum split into blocks of k, or the
// gradient of an input that feeds several layers). The tile arrays are
// indexed only inside unrolled loops (see attention.comp on lavapipe and
// private arrays).
//
// Variants: TEXEL_LOADS / VEC4_LOADS as in loads.glsl, for A and B.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

const int TR = 4; // rows of C (m) per invocation
const int TC = 4; // columns of C (n) per invocation

layout(std140, binding = GBIND_PARAMS) uniform Params {
    ivec4 dims; // M, N, K, flags
    ivec4 a;    // A element offset, stride (k stride with GFLAG_A_ROWS, else row stride)
    ivec4 b;    // B element offset, k stride
    ivec4 c;    // C element offset, row stride
} P;

#include "loads.glsl"
INPUT(GBIND_A, At)
INPUT(GBIND_B, Bt)
#define At_SCALES 0 // never q8_0
#define Bt_SCALES 0
// Element types of A and B (TYPE_F32, TYPE_F16, TYPE_BF16): a layer's
// inputs and weights are read as they are stored.
layout(constant_id = SPEC_A_TYPE) const int A_TYPE = 0;
layout(constant_id = SPEC_B_TYPE) const int B_TYPE = 0;
layout(std430, binding = GBIND_C) buffer CBuf { float cData[]; };

void main() {
    int M = P.dims.x;
    int N = P.dims.y;
    int K = P.dims.z;
    bool aRows = (P.dims.w & GFLAG_A_ROWS) != 0;
    int col0 = int(gl_GlobalInvocationID.x) * TC;
    int row0 = int(gl_WorkGroupID.y) * TR;
    if (col0 >= N) {
        return;
    }
    // A's rows when read along k (clamped: rows past M are not stored);
    // the first element of step 0 of A's and B's rows when read along
    // them, and how far a step moves them.
    int aBase[TR];
    vec4 acc[TR]; // acc[r][c]: C[row0 + r, col0 + c]
    [[unroll]] for (int r = 0; r < TR; r++) {
        aBase[r] = P.a.x + min(row0 + r, M - 1) * P.a.y;
        acc[r] = vec4(0.0);
    }
    int aStride = P.a.y, bStride = P.b.y;
    int aAt = P.a.x, bAt = P.b.x;
    int steps = (K + 3) / 4;
    for (int s = 0; s < steps; s++) {
        // Sums past K (the last step's) read their row K - 1 and drop it.
        int live = K - 4 * s;
        vec4 a[TR]; // a[r][i]: A[row0 + r, 4s + i]
        vec4 b[4];  // b[i][c]: B[col0 + c, 4s + i]
        if (aRows) {
            vec4 t[4]; // t[i][r]
            [[unroll]] for (int i = 0; i < 4; i++) {
                vec4 v = LOAD4(At, A_TYPE, aAt + min(i, live - 1) * aStride, row0 / 4, M);
                t[i] = i < live ? v : vec4(0.0);
            }
            [[unroll]] for (int r = 0; r < TR; r++) {
                a[r] = vec4(t[0][r], t[1][r], t[2][r], t[3][r]);
            }
        } else {
            [[unroll]] for (int r = 0; r < TR; r++) {
                a[r] = LOAD4(At, A_TYPE, aBase[r], s, K);
            }
        }
        [[unroll]] for (int i = 0; i < 4; i++) {
            vec4 v = LOAD4(Bt, B_TYPE, bAt + min(i, live - 1) * bStride, col0 / 4, N);
            b[i] = i < live ? v : vec4(0.0);
        }
        aAt += 4 * aStride;
        bAt += 4 * bStride;
        [[unroll]] for (int r = 0; r < TR; r++) {
            [[unroll]] for (int i = 0; i < 4; i++) {
                acc[r] += a[r][i] * b[i];
            }
        }
    }
    bool accumulate = (P.dims.w & GFLAG_ACCUMULATE) != 0;
    [[unroll]] for (int r = 0; r < TR; r++) {
        if (row0 + r < M) {
            int cBase = P.c.x + (row0 + r) * P.c.y + col0;
            [[unroll]] for (int c = 0; c < TC; c++) {
                if (col0 + c < N) {
                    cData[cBase + c] = accumulate ? cData[cBase + c] + acc[r][c] : acc[r][c];
                }
            }
        }
    }
}
