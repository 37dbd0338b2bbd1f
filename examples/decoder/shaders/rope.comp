#version 450
// Rotary position embedding in place, HF Llama's rotate_half layout: in
// each head of width w, element i pairs with i + w/2 (i < w/2) and the
// pair turns by the angle pos * theta^(-2i/w). The cosines and sines come
// from a table the host fills in float64 (positions x w/2 pairs x {cos,
// sin}): Vulkan lets sin and cos be off by 2^-11, more than the model's
// tolerance.
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Table { float table[]; };

layout(push_constant) uniform Push {
	uint heads;
	uint width; // of a head; even
	uint pos;   // the row of the table
};

void main() {
	uint half_width = width / 2u;
	uint g = gl_GlobalInvocationID.x;
	if (g >= heads * half_width) {
		return;
	}
	uint i = g % half_width;
	uint a = (g / half_width) * width + i;
	uint b = a + half_width;
	uint at = 2u * (pos * half_width + i);
	float c = table[at];
	float s = table[at + 1u];
	float x0 = x[a];
	float x1 = x[b];
	x[a] = x0 * c - x1 * s;
	x[b] = x1 * c + x0 * s;
}
