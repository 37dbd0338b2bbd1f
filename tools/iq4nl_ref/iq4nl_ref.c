/*
 * iq4nl_ref: an independent reproduction of ggml's iq4_nl reference
 * quantizer (quantize_row_iq4_nl_ref in ggml/src/ggml-quants.c, ggml since
 * March 2024: quantize_row_iq4_nl_impl with block 32, no importance
 * weights and ntry = -1), written from the algorithm for vkattn's tests.
 * It writes the inputs and ggml's blocks for them:
 *
 *   gcc -O0 -ffp-contract=off -o /tmp/iq4nl_ref tools/iq4nl_ref/iq4nl_ref.c
 *   /tmp/iq4nl_ref testdata/iq4_nl
 *
 * DIR/input.f32   the values, float32 in the host's byte order (little-
 *                 endian: x86-64 and arm64), whole blocks of 32
 * DIR/blocks.bin  18 bytes a block, as block_iq4_nl: the float16 scale d
 *                 (little-endian), then 16 bytes, byte j holding element
 *                 j's index in its low nibble and element j+16's in its
 *                 high one
 *
 * The algorithm, per block of 32 (all float32 arithmetic, no fused
 * multiply-add: -ffp-contract=off, and x86-64 gcc at -O0 keeps every
 * operation in single precision):
 *   amax, max: the first element of largest |x| and its value;
 *   amax < 1e-15 (GROUP_MAX_EPS): scale 0; ggml leaves that block's indices
 *     as its index array last held them (the previous block's, or
 *     indeterminate), and this reproduction, like vkattn, writes index 0;
 *   d = max / -127 (kvalues[0]), id = 1 / d;
 *   each index l = nearest level to id*x (ties to the upper level), and
 *     with the weight w = x*x: sumqx += w*q*x, sumq2 += w*q*q in order;
 *   the scale sumqx / sumq2 (0 if sumq2 is not positive), stored as the
 *     nearest float16 (ties to even, subnormals kept); the indices are the
 *     first pass's (ntry = -1 runs no search and no second pass).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static const int8_t levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* nearest: the index of the level nearest to v; a v halfway between two
 * levels takes the upper one. A linear scan over the midpoints. */
static int nearest(float v) {
	int best = 0;
	for (int i = 1; i < 16; i++) {
		/* 2v >= lo + hi, both sides exact in float (|v| well within range) */
		if ((double)v * 2.0 >= (double)levels[i - 1] + (double)levels[i]) {
			best = i;
		}
	}
	return best;
}

/* half_bits: x rounded to the nearest IEEE binary16, ties to even, by
 * gcc's _Float16 conversion (software, correctly rounded). */
static uint16_t half_bits(float x) {
	_Float16 h = (_Float16)x;
	uint16_t b;
	memcpy(&b, &h, 2);
	return b;
}

static void quantize_block(const float *x, uint8_t out[18]) {
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < 32; j++) {
		float a = fabsf(x[j]);
		if (a > amax) {
			amax = a;
			max = x[j];
		}
	}
	uint8_t idx[32];
	memset(idx, 0, sizeof idx);
	float scale = 0.0f;
	if (!(amax < 1e-15f)) {
		volatile float d = max / (float)levels[0];
		volatile float id = 1.0f / d;
		volatile float sumqx = 0.0f, sumq2 = 0.0f;
		for (int j = 0; j < 32; j++) {
			volatile float v = id * x[j];
			int l = nearest(v);
			idx[j] = (uint8_t)l;
			float q = (float)levels[l];
			volatile float w = x[j] * x[j];
			volatile float wq = w * q;
			volatile float t1 = wq * x[j];
			volatile float t2 = wq * q;
			sumqx = sumqx + t1;
			sumq2 = sumq2 + t2;
		}
		scale = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
	}
	uint16_t h = half_bits(scale);
	out[0] = (uint8_t)(h & 0xff);
	out[1] = (uint8_t)(h >> 8);
	for (int j = 0; j < 16; j++) {
		out[2 + j] = (uint8_t)(idx[j] | (idx[j + 16] << 4));
	}
}

/* A small xorshift generator and Box-Muller normals: the inputs only
 * need to be fixed, not good. */
static uint64_t state = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return ((state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float normal(void) {
	double u = uniform(), v = uniform();
	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#define MAXBLOCKS 256
static float data[MAXBLOCKS * 32];
static int nblocks;

static float *next_block(void) {
	if (nblocks == MAXBLOCKS) {
		fprintf(stderr, "too many blocks\n");
		exit(1);
	}
	return &data[32 * nblocks++];
}

/* The midpoints between neighbouring levels, times s: with max = -127 s
 * (d = s, id = 1/s exact for a power of two s) each lands on a tie. */
static void ties(float s, float sign) {
	float *b = next_block();
	b[0] = -127.0f * s * sign;
	for (int j = 1; j < 32; j++) {
		int i = 1 + (j - 1) % 15;
		b[j] = (float)(levels[i - 1] + levels[i]) * 0.5f * s * sign;
	}
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: iq4nl_ref DIR\n");
		return 2;
	}
	/* Ties between levels at both signs of max and several scales. */
	ties(1.0f, 1.0f);
	ties(1.0f, -1.0f);
	ties(0.25f, 1.0f);
	ties(1024.0f, -1.0f);
	/* An all-zero block, a tiny one (below GROUP_MAX_EPS) and a small one
	 * just above it, and blocks of one nonzero value. */
	next_block();
	float *b = next_block();
	for (int j = 0; j < 32; j++) b[j] = (j % 3 - 1) * 3e-16f;
	b = next_block();
	for (int j = 0; j < 32; j++) b[j] = normal() * 1e-3f;
	b[7] = -4e-3f;
	/* Just above it: products w*q*x fall below float32's normal range. */
	b = next_block();
	for (int j = 0; j < 32; j++) b[j] = normal() * 1e-15f;
	b[11] = 3e-15f;
	b = next_block();
	b[31] = 2.5f;
	b = next_block();
	b[0] = -0.75f;
	/* The first of equal magnitudes sets max's sign. */
	b = next_block();
	for (int j = 0; j < 32; j++) b[j] = normal();
	b[3] = 5.0f;
	b[9] = -5.0f;
	b = next_block();
	for (int j = 0; j < 32; j++) b[j] = normal();
	b[3] = -5.0f;
	b[9] = 5.0f;
	/* Large magnitudes, up to vkattn's safe bound (65504 * 112). */
	b = next_block();
	for (int j = 0; j < 32; j++) b[j] = normal() * 1e6f;
	b[5] = 7.3e6f;
	b = next_block();
	for (int j = 0; j < 32; j++) b[j] = normal() * 3e4f;
	/* A block at the top of the positive levels: many values near 127 s
	 * with max negative, so their level is 113. */
	b = next_block();
	b[0] = -127.0f;
	for (int j = 1; j < 32; j++) b[j] = 100.0f + 0.8f * (float)j;
	/* Random normals at assorted scales, and outliers. */
	while (nblocks < 96) {
		b = next_block();
		float s = (float)pow(10.0, uniform() * 8.0 - 4.0);
		for (int j = 0; j < 32; j++) b[j] = normal() * s;
		if (nblocks % 4 == 0) b[(int)(uniform() * 32)] *= 8.0f;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/input.f32", argv[1]);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 4, 32 * (size_t)nblocks, f) != 32 * (size_t)nblocks || fclose(f) != 0) {
		perror(path);
		return 1;
	}
	snprintf(path, sizeof path, "%s/blocks.bin", argv[1]);
	f = fopen(path, "wb");
	if (!f) {
		perror(path);
		return 1;
	}
	for (int i = 0; i < nblocks; i++) {
		uint8_t out[18];
		quantize_block(&data[32 * i], out);
		if (fwrite(out, 1, 18, f) != 18) {
			perror(path);
			return 1;
		}
	}
	if (fclose(f) != 0) {
		perror(path);
		return 1;
	}
	return 0;
}
