#version 450
// y = W x for a row-major W of rows x cols (nn.Linear's [out, in]), one
// lane per output row. With accumulate != 0 it adds to y instead
// (y += W x), which is how the residual stream takes each block's output.
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Weights { float w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Y { float y[]; };

layout(push_constant) uniform Push {
	uint rows;
	uint cols;
	uint accumulate;
};

void main() {
	uint r = gl_GlobalInvocationID.x;
	if (r >= rows) {
		return;
	}
	uint base = r * cols;
	float s = 0.0;
	for (uint c = 0u; c < cols; c++) {
		s += w[base + c] * x[c];
	}
	y[r] = accumulate != 0u ? y[r] + s : s;
}
