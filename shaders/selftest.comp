#version 450
// A tiny kernel for the vk layer's own tests: writes
// out[i] = in[i] * push.factor + SPEC_ADD for i < push.count, exercising
// storage buffers, push constants and specialization constants.

layout(local_size_x = 64) in;
layout(constant_id = 0) const int SPEC_ADD = 0;

layout(push_constant) uniform Push {
    float factor;
    uint count;
} push;

layout(std430, binding = 0) readonly buffer In { float inData[]; };
layout(std430, binding = 1) writeonly buffer Out { float outData[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < push.count) {
        outData[i] = inData[i] * push.factor + float(SPEC_ADD);
    }
}
