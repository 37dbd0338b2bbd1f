#version 450
// SwiGLU's gate: out = silu(g) * u, silu(g) = g / (1 + exp(-g)).
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push {
	uint n;
};

void main() {
	uint i = gl_GlobalInvocationID.x;
	if (i >= n) {
		return;
	}
	float v = g[i];
	// For v far below zero exp(-v) is +Inf and v / Inf is -0: silu's limit.
	o[i] = v / (1.0 + exp(-v)) * u[i];
}
