#version 450
// RMSNorm of one vector: y = x / sqrt(mean(x^2) + eps) * weight. One
// workgroup; each lane sums a strided part of x^2, then a tree in shared
// memory adds the partial sums in a fixed order.
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float weight[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
	uint n;
	float eps;
};

shared float partial[64];

void main() {
	uint lane = gl_LocalInvocationID.x;
	float s = 0.0;
	for (uint i = lane; i < n; i += 64u) {
		s += x[i] * x[i];
	}
	partial[lane] = s;
	barrier();
	for (uint stride = 32u; stride > 0u; stride >>= 1) {
		if (lane < stride) {
			partial[lane] += partial[lane + stride];
		}
		barrier();
	}
	float r = inversesqrt(partial[0] / float(n) + eps);
	for (uint i = lane; i < n; i += 64u) {
		y[i] = x[i] * r * weight[i];
	}
}
