#version 450
#extension GL_EXT_control_flow_attributes : require
// Colours one head of attention weights into an rgba8 image with the
// heat-map palette, for the viewer (pixel (j, i) is query i, key j), in
// three passes over the same bindings:
//   pass 0: ||v_j|| of the value head's rows, when drawing contributions
//   pass 1: the largest value drawn, the top of the colour scale (one workgroup)
//   pass 2: each pixel, palette entry int(value * (n-1) / top + 0.5) as
//           heatmap.Index rounds it, so the window matches the pictures.

layout(local_size_x = 16, local_size_y = 16) in;

layout(push_constant) uniform Push {
    uint wOffset;  // element offset of the head's (L, S) weights
    uint wRow;     // elements between query rows
    uint vOffset;  // element offset of the value head's (S, d_v) rows
    uint vRow;     // elements between value rows
    uint L;
    uint S;
    uint dv;
    uint mode;     // 0: weights a_ij, 1: contributions a_ij * ||v_j||
    uint pass;
    uint colours;  // palette entries
} P;

layout(std430, binding = 0) readonly buffer WBuf { float w[]; };
layout(std430, binding = 1) readonly buffer VBuf { float v[]; };
layout(std430, binding = 2) readonly buffer LutBuf { uint lut[]; };  // packed RGBA8
layout(std430, binding = 3) buffer ScaleBuf { float top; float norm[]; };
layout(rgba8, binding = 4) uniform writeonly image2D img;

shared float part[256];

float cell(uint i, uint j) {
    float a = w[P.wOffset + i * P.wRow + j];
    return P.mode == 1u ? a * norm[j] : a;
}

void main() {
    uint lid = gl_LocalInvocationIndex;
    if (P.pass == 0u) {
        uint j = gl_WorkGroupID.x * 256u + lid;
        if (j < P.S) {
            float s = 0.0;
            for (uint k = 0u; k < P.dv; k++) {
                float x = v[P.vOffset + j * P.vRow + k];
                s += x * x;
            }
            norm[j] = sqrt(s);
        }
        return;
    }
    if (P.pass == 1u) {
        // lavapipe ends an invocation's loops after 65,535 iterations:
        // 16 cells a turn (unrolled) reach 268 M cells, more than any
        // picture it can hold.
        float m = 0.0;
        uint n = P.L * P.S;
        for (uint c0 = lid; c0 < n; c0 += 16u * 256u) {
            [[unroll]] for (uint u = 0u; u < 16u; u++) {
                uint c = c0 + u * 256u;
                if (c < n) {
                    m = max(m, cell(c / P.S, c % P.S));
                }
            }
        }
        part[lid] = m;
        barrier();
        for (uint s = 128u; s > 0u; s >>= 1) {
            if (lid < s) {
                part[lid] = max(part[lid], part[lid + s]);
            }
            barrier();
        }
        if (lid == 0u) {
            top = part[0];
        }
        return;
    }
    uint j = gl_GlobalInvocationID.x;
    uint i = gl_GlobalInvocationID.y;
    if (i >= P.L || j >= P.S) {
        return;
    }
    float x = cell(i, j);
    float m = top > 0.0 ? top : 1.0;  // every cell zero: the colour of 0
    uint k = 0u;
    if (x >= m) {
        k = P.colours - 1u;
    } else if (x > 0.0) {
        k = uint(x * (float(P.colours - 1u) / m) + 0.5);
    }
    imageStore(img, ivec2(j, i), unpackUnorm4x8(lut[k]));
}
