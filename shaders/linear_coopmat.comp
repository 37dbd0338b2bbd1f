#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "coopmat.glsl"
// Dense layer Y = X W^T + b on the matrix units (VK_KHR_cooperative_matrix)
// for float16 X and W, linear.comp's layout and bindings (SEMANTICS.md
// §9.3): each product of two halves is exact in float32 and the sums are
// float32, so Y is what linear.comp computes, summed in another order.
//
// A workgroup computes a TILE x TILE block of Y with NSG = (TILE / MM)^2
// subgroups, one MM x MM block of the accumulator each, over steps of TILE
// inputs: X's and W's slices are staged in shared memory as float16
// (rows past M or N clamped, inputs past K zero), W's read column-major
// as W^T. The accumulators go through shared memory to add the bias and
// store the rows and outputs that exist.

layout(constant_id = SPEC_MM) const int MM = 16;   // the matrices' M = N = K
layout(constant_id = SPEC_TILE) const int TILE = 32; // rows, outputs and inputs per step
layout(constant_id = SPEC_SG) const int SG = 32;   // lanes per subgroup (full subgroups required)

const int NB = TILE / MM; // accumulator blocks per side
const int WG = NB * NB * SG;
const int T4 = TILE / 4;  // vec4s per staged row

#include "linear_params.glsl"

#include "loads.glsl"
INPUT(LBIND_X, Xt)
INPUT(LBIND_W, Wt)
#define Xt_SCALES 0
#define Wt_SCALES 0
const int X_TYPE = TYPE_F16; // the family reads float16 only
const int W_TYPE = TYPE_F16;
layout(std430, binding = LBIND_BIAS) readonly buffer BiasBuf { float bias[]; };
layout(std430, binding = LBIND_Y) writeonly buffer YBuf { float yData[]; };

shared float16_t xS[TILE * TILE]; // X's rows, this step's inputs
shared float16_t wS[TILE * TILE]; // W's rows (outputs), this step's inputs
shared float yS[TILE * TILE];     // the block of Y before the bias

// stage copies TILE rows (row r from element first + min(r0 + r, last) *
// stride), inputs k0 .. k0 + TILE of K, into dst as float16.
#define STAGE(dst, src, T, first, stride, r0, last, k0, K)                        \
    [[unroll]] for (int i0 = 0; i0 < TILE * T4; i0 += WG) {                      \
        int i = i0 + lane;                                                       \
        if (i < TILE * T4) {                                                     \
            int r = i / T4;                                                      \
            int c = i % T4;                                                      \
            vec4 v = LOAD4(src, T, (first) + min((r0) + r, last) * (stride), (k0) / 4 + c, K); \
            STORE_HALF4(dst, r * TILE + 4 * c, v)                                \
        }                                                                        \
    }

void main() {
    int M = P.dims.x;
    int N = P.dims.y;
    int K = P.dims.z;
    int lane = int(gl_LocalInvocationID.x);
    int sg = int(gl_SubgroupID);
    int col0 = int(gl_WorkGroupID.x) * TILE;
    int row0 = int(gl_WorkGroupID.y) * TILE;
    int bi = sg / NB; // this subgroup's block: rows bi*MM.., outputs bj*MM..
    int bj = sg % NB;

    MAT_C acc = MAT_C(0.0);
    for (int k0 = 0; k0 < K; k0 += TILE) {
        barrier(); // the previous step's tiles are no longer read
        STAGE(xS, Xt, X_TYPE, P.x.x, P.x.y, row0, M - 1, k0, K)
        STAGE(wS, Wt, W_TYPE, P.w.x, P.w.y, col0, N - 1, k0, K)
        barrier();
        // W's slice read column-major is W^T.
        MUL_ADD_BLOCKS(acc, NB, xS, bi * MM * TILE, MM, TILE, wS, bj * MM * TILE, MM, TILE, gl_CooperativeMatrixLayoutColumnMajor)
    }
    coopMatStore(acc, yS, bi * MM * TILE + bj * MM, TILE, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    bool withBias = (P.dims.w & LFLAG_BIAS) != 0;
    [[unroll]] for (int i0 = 0; i0 < TILE * TILE; i0 += WG) {
        int i = i0 + lane;
        int r = row0 + i / TILE;
        int c = col0 + i % TILE;
        if (i < TILE * TILE && r < M && c < N) {
            yData[P.y.x + r * P.y.y + c] = yS[i] + (withBias ? bias[P.y.z + c] : 0.0);
        }
    }
}
