#version 450
#extension GL_GOOGLE_include_directive : require
// Moves and sums of float gradients between the steps of a layer's
// backward pass, in fp32 and in a fixed order (no atomics):
//
//   copy (default): dst[i0, i1, i2, j] (+)= src[i0, i1, i2, j] over the
//     extents n.xyzw, each side at its offset plus i0, i1 and i2 times its
//     strides (j contiguous): a layer's heads (B, h, T, dh) to the rows
//     (B*T, h*dh) of a projection and back, or a gradient widened to
//     float32. One invocation per element.
//   RFLAG_SUM: dst[i0, i1, j] (+)= sum over i2 of src[i0, i1, i2, j], i2 in
//     order: a bias's gradient, the column sums of a layer's output
//     gradient over its rows. One invocation per sum.
//
// RFLAG_ACCUMULATE adds to dst (a sum split into blocks of rows). The
// source is read as its element type (a specialization constant);
// storage buffers, read element by element.

#include "interface.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform Push {
    ivec4 n;   // extents of i0, i1, i2, j
    ivec4 src; // element offset, strides of i0, i1, i2
    ivec4 dst; // element offset, strides of i0, i1, i2 (unused when summing)
    int flags;
} P;

#include "loads.glsl"
INPUT(XBIND_SRC, St)
#define St_SCALES 0 // never q8_0
layout(constant_id = SPEC_SRC_TYPE) const int SRC_TYPE = 0;
layout(std430, binding = XBIND_DST) buffer DstBuf { float dst[]; };

void main() {
    int e = int(gl_GlobalInvocationID.x);
    int i0 = int(gl_WorkGroupID.z);
    int i1 = int(gl_WorkGroupID.y);
    bool sum = (P.flags & RFLAG_SUM) != 0;
    int i2 = sum ? 0 : e / P.n.w;
    int j = sum ? e : e % P.n.w;
    if (j >= P.n.w || i2 >= P.n.z) {
        return;
    }
    int from = P.src.x + i0 * P.src.y + i1 * P.src.z + j;
    float v;
    int to;
    if (sum) {
        v = 0.0;
        for (int r = 0; r < P.n.z; r++) {
            v += AT(St, SRC_TYPE, from + r * P.src.w);
        }
        to = P.dst.x + i0 * P.dst.y + i1 * P.dst.z + j;
    } else {
        v = AT(St, SRC_TYPE, from + i2 * P.src.w);
        to = P.dst.x + i0 * P.dst.y + i1 * P.dst.z + i2 * P.dst.w + j;
    }
    dst[to] = (P.flags & RFLAG_ACCUMULATE) != 0 ? dst[to] + v : v;
}
