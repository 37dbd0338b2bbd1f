#version 450
// Embedding gather: x = table[token], one lane per element of the row.
// The token id comes from a buffer the host writes before each submission,
// so the recorded commands need not change with it.
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Token { uint token; };
layout(std430, binding = 1) readonly buffer Table { float table[]; };
layout(std430, binding = 2) writeonly buffer Out { float x[]; };

layout(push_constant) uniform Push {
	uint width; // elements per row (d_model)
	uint rows;  // rows in the table (vocabulary size)
};

void main() {
	uint i = gl_GlobalInvocationID.x;
	if (i >= width) {
		return;
	}
	// The host checks ids; the clamp keeps a bad one from reading past the
	// table (no robustBufferAccess is asked for).
	uint t = min(token, rows - 1u);
	x[i] = table[t * width + i];
}
