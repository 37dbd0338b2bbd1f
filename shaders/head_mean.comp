#version 450
#extension GL_GOOGLE_include_directive : require
// Mean over heads of attention weights: (B, H, L*S) -> (B, L*S), the
// averaged weights of PyTorch's need_weights. One invocation per output.

#include "interface.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform Push {
    int B;
    int H;
    int LS; // L * S
} P;

layout(std430, binding = HBIND_W) readonly buffer WBuf { float w[]; };
layout(std430, binding = HBIND_MEAN) writeonly buffer MBuf { float meanW[]; };

void main() {
    int i = int(gl_GlobalInvocationID.x);
    if (i >= P.B * P.LS) {
        return;
    }
    int b = i / P.LS;
    int pos = i % P.LS;
    float s = 0.0;
    for (int h = 0; h < P.H; h++) {
        s += w[(b * P.H + h) * P.LS + pos];
    }
    meanW[i] = s / float(P.H);
}
