// Row loads shared by the kernels that read rows four elements at a time.
// Before including, a shader defines TEXEL_LOADS (inputs are uniform texel
// buffers) or not (std430 storage buffers), and VEC4_LOADS (rows are read
// four elements per load: widths, offsets and strides are multiples of 4)
// or not.
//
// Every input is read as raw words and widened to float32 here, by its
// element type (pipelines.DType): float32, float16, bfloat16 or (K and V)
// q8_0 or q4_0, a specialization constant per input, so one SPIR-V serves every
// mix of types and the driver folds the other branches away. Halves are
// read as packed 32-bit words (storage) or 16-bit texels (texel views),
// which needs no 16-bit storage feature: it runs on every Vulkan device.
//
// A q8_0 input holds a byte per element (an int8 quant, four a word) and,
// from half name_SCALES of its buffer on, one float16 scale per block of
// Q8_BLOCK (32) elements; element i is quant(i) * scale(i / Q8_BLOCK),
// exact in float32. A q4_0 input holds ggml's 16 bytes of nibbles per
// block of Q4_BLOCK (32) elements, blocks in element order, and its
// float16 scales from half name_SCALES on; element j of a block is the
// low nibble of the block's byte j & 15 for j < 16, the high nibble for
// j >= 16, and reads as (nibble - 8) * scale, exact in float32.
// Only builds with Q8_LOADS defined read either (the rest carry no
// quantized code, which lavapipe would spend compile time on); a shader
// defines name_SCALES for each input (0 where it is never quantized).
//
// INPUT(b, name) declares input name at binding b; LOAD4(name, T, base, c, n)
// is slot c (elements 4c..4c+3) of the row of width n that starts at
// element base of input name of type T; elements past the row read as zero.
// The type codes (TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0),
// Q8_BLOCK and Q4_BLOCK are interface.glsl's, which the including shader
// includes first.

// f16Bits widens the float16 in the low 16 bits of h, exactly: integer
// operations only, so subnormal halves survive on drivers that flush them
// in conversions.
float f16Bits(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    float subnormal = float(m) * 5.9604644775390625e-8; // m * 2^-24, exact
    uint e32 = e == 31u ? 255u : e + 112u;              // Inf/NaN stay so
    float normal = uintBitsToFloat((e32 << 23) | (m << 13));
    return uintBitsToFloat(floatBitsToUint(e == 0u ? subnormal : normal) | sign);
}

// widen16 widens the half of type T (TYPE_F16 or TYPE_BF16) in the low 16
// bits of h; bfloat16 is the upper half of a float32, a shift.
float widen16(uint h, int T) {
    return T == TYPE_F16 ? f16Bits(h & 0xffffu) : uintBitsToFloat(h << 16);
}

vec4 widen16x4(uvec4 h, int T) {
#ifdef UNPACK_HALVES
    // The driver's conversion (unpackHalf2x16): on lavapipe one vcvtph2ps
    // per pair of slots instead of a dozen integer operations per element.
    // Exact for subnormal halves only where the driver keeps them: a
    // shader defines UNPACK_HALVES only for kernels run on such drivers.
    if (T == TYPE_F16) {
        return vec4(unpackHalf2x16(h.x | (h.y << 16)), unpackHalf2x16(h.z | (h.w << 16)));
    }
#endif
    return vec4(widen16(h.x, T), widen16(h.y, T), widen16(h.z, T), widen16(h.w, T));
}

// The four halves of the words of w, two a word, each in the low 16 bits
// of its slot (widen16 reads no more).
uvec4 halves4(uvec2 w) { return uvec4(w.x, w.x >> 16, w.y, w.y >> 16); }

// widen16x4pair widens halves 4..7 (high) or 0..3 of the eight packed
// two a word in w.
vec4 widen16x4pair(uvec4 w, bool high, int T) {
    uvec2 pair = high ? w.zw : w.xy;
#ifdef UNPACK_HALVES
    if (T == TYPE_F16) {
        return vec4(unpackHalf2x16(pair.x), unpackHalf2x16(pair.y));
    }
#endif
    return widen16x4(halves4(pair), T);
}

// The four int8 quants of word w, as floats.
vec4 q8x4(uint w) {
    int x = int(w);
    return vec4(bitfieldExtract(x, 0, 8), bitfieldExtract(x, 8, 8), bitfieldExtract(x, 16, 8), bitfieldExtract(x, 24, 8));
}
// Q8_SCALE is the scale of element i's block of a q8_0 input whose scales
// start at half s; Q8_AT element i; Q8_ROW4 slot c of the row at base (a
// word of four quants of one block).
#define Q8_HALF(name, h) (WORD(name, (h) >> 1) >> (((h) & 1) * 16))
#ifdef UNPACK_HALVES
#define SCALE16(h) unpackHalf2x16(h).x
#else
#define SCALE16(h) f16Bits(h)
#endif
#define Q8_SCALE(name, s, i) SCALE16(Q8_HALF(name, (s) + ((i) >> Q8_BLOCK_SHIFT)))
#define Q8_AT(name, s, i) (float(bitfieldExtract(int(WORD(name, (i) >> 2)), ((i) & 3) * 8, 8)) * Q8_SCALE(name, s, i))
#define Q8_ROW4(name, s, base, c) (q8x4(WORD(name, ((base) >> 2) + (c))) * Q8_SCALE(name, s, (base) + 4 * (c)))

// The four quants of word w from bit shift on (shift 0: low nibbles, 4:
// high), minus 8, as floats.
vec4 q4x4(uint w, int shift) {
    uvec4 n = (uvec4(w) >> uvec4(shift, shift + 8, shift + 16, shift + 24)) & 0xfu;
    return vec4(ivec4(n) - 8);
}
// Q4_WORD is the word holding element i's nibble, Q4_BIT its first bit:
// byte i & 15 of block i >> Q4_BLOCK_SHIFT's four words, the high half
// for the block's elements 16..31. Q4_AT is element i of a q4_0 input whose
// scales start at half s; Q4_ROW4 slot c of the row at base (four
// elements of one block, in one word).
#define Q4_WORD(i) ((((i) >> Q4_BLOCK_SHIFT) << 2) + (((i) >> 2) & 3))
#define Q4_BIT(i) ((((i) & 3) << 3) + (((i) >> 2) & 4))
#define Q4_SCALE(name, s, i) SCALE16(Q8_HALF(name, (s) + ((i) >> Q4_BLOCK_SHIFT)))
#define Q4_AT(name, s, i) (float(int(bitfieldExtract(WORD(name, Q4_WORD(i)), Q4_BIT(i), 4)) - 8) * Q4_SCALE(name, s, i))
#define Q4_ROW4(name, s, base, c) (q4x4(WORD(name, Q4_WORD((base) + 4 * (c))), Q4_BIT((base) + 4 * (c))) * Q4_SCALE(name, s, (base) + 4 * (c)))
#ifdef Q8_LOADS
#define IF_QUANT(T, q8, q4, other) ((T) == TYPE_Q8_0 ? (q8) : ((T) == TYPE_Q4_0 ? (q4) : (other)))
#else
#define IF_QUANT(T, q8, q4, other) (other)
#endif

#ifdef TEXEL_LOADS
// 32-bit inputs through R32UI / RGBA32UI views, halves through R16UI /
// RGBA16UI views, or RGBA32UI ones with HALVES8 (pipelines picks the view
// format by the element type and the plan).
#define INPUT(b, name) layout(binding = b) uniform usamplerBuffer name;
#ifdef VEC4_LOADS
#define WORD(name, w) texelFetch(name, (w) >> 2)[(w) & 3]
#define ROW4(name, T, base, c) IF_QUANT(T, Q8_ROW4(name, name##_SCALES, base, c), Q4_ROW4(name, name##_SCALES, base, c), \
                                       ((T) == TYPE_F32 ? uintBitsToFloat(texelFetch(name, ((base) >> 2) + (c)))          \
                                                        : widen16x4(texelFetch(name, ((base) >> 2) + (c)), T)))
#else
#define WORD(name, w) texelFetch(name, (w)).r
#define AT(name, T, i) IF_QUANT(T, Q8_AT(name, name##_SCALES, i), Q4_AT(name, name##_SCALES, i), \
                               ((T) == TYPE_F32 ? uintBitsToFloat(texelFetch(name, (i)).r) : widen16(texelFetch(name, (i)).r, T)))
#endif
#else
#ifdef VEC4_LOADS
// Four float32s are a uvec4, four halves a uvec2 of the same binding.
#define INPUT(b, name)                                                      \
    layout(std430, binding = b) readonly buffer name##Words { uvec4 name[]; };   \
    layout(std430, binding = b) readonly buffer name##Halves { uvec2 name##H[]; }; \
    layout(std430, binding = b) readonly buffer name##Single { uint name##W[]; };
#define WORD(name, w) name##W[(w)]
#define ROW4(name, T, base, c) IF_QUANT(T, Q8_ROW4(name, name##_SCALES, base, c), Q4_ROW4(name, name##_SCALES, base, c), \
                                       ((T) == TYPE_F32 ? uintBitsToFloat(name[((base) >> 2) + (c)])                     \
                                                        : widen16x4(halves4(name##H[((base) >> 2) + (c)]), T)))
#else
// Element i of a half input is half (i & 1) of word i >> 1.
#define INPUT(b, name) layout(std430, binding = b) readonly buffer name##Words { uint name[]; };
#define WORD(name, w) name[(w)]
#define AT(name, T, i) IF_QUANT(T, Q8_AT(name, name##_SCALES, i), Q4_AT(name, name##_SCALES, i), \
                               ((T) == TYPE_F32 ? uintBitsToFloat(name[(i)]) : widen16(name[(i) >> 1] >> (((i) & 1) * 16), T)))
#endif
#endif

#ifdef VEC4_LOADS
// The load is unconditional (its slot clamped into the row) and the tail
// zeroed by a select: a conditional load compiles to a branch, which
// lavapipe runs as both sides and a masked write of the result.
vec4 zeroPast(vec4 v, bool inRow) { return inRow ? v : vec4(0.0); }
#ifdef TEXEL_LOADS
// With HALVES8 (a macro the including shader may define as one of its
// specialization constants; false where it defines none) float16 and
// bfloat16 inputs are RGBA32UI views, eight halves a texel, rows of whole
// texels: slots 2k and 2k+1 are one fetch (the same clamped index, which
// the compiler fetches once).
#ifndef HALVES8
#define HALVES8 false
#endif
// With QUANT_BLOCKS (the same kind of macro) q8_0 and q4_0 rows start and
// end on whole blocks of 32: the slots of a row that share a texel of
// quants (four of q8_0, a block's eight of q4_0) and the eight that share
// a block's scale use one clamped index each, so each is fetched once, not
// once a slot.
#ifndef QUANT_BLOCKS
#define QUANT_BLOCKS false
#endif
#ifdef Q8_LOADS
// BLOCK_OF is the block of slot c of the row at base, clamped into the row.
#define BLOCK_OF(base, c, n) (((base) >> Q8_BLOCK_SHIFT) + min((c) >> 3, max(((n) - 1) >> Q8_BLOCK_SHIFT, 0)))
#define Q8_ROW4_BLOCKS(name, s, base, c, n)                                                      \
    (q8x4(texelFetch(name, ((base) >> 4) + min((c) >> 2, max(((n) - 1) >> 4, 0)))[(c) & 3]) * \
     SCALE16(Q8_HALF(name, (s) + BLOCK_OF(base, c, n))))
#define Q4_ROW4_BLOCKS(name, s, base, c, n) \
    (q4x4(texelFetch(name, BLOCK_OF(base, c, n))[(c) & 3], (c) & 4) * SCALE16(Q8_HALF(name, (s) + BLOCK_OF(base, c, n))))
#define QUANT_ROW4_BLOCKS(name, T, base, c, n) \
    ((T) == TYPE_Q8_0 ? Q8_ROW4_BLOCKS(name, name##_SCALES, base, c, n) : Q4_ROW4_BLOCKS(name, name##_SCALES, base, c, n))
#else
#define QUANT_ROW4_BLOCKS(name, T, base, c, n) vec4(0.0)
#endif
#define ROW4_CLAMPED(name, T, base, c, n)                                                                         \
    ((HALVES8 && ((T) == TYPE_F16 || (T) == TYPE_BF16))                                                           \
         ? widen16x4pair(texelFetch(name, ((base) >> 3) + min((c) >> 1, max(((n) - 1) >> 3, 0))), ((c) & 1) != 0, T) \
     : (QUANT_BLOCKS && ((T) == TYPE_Q8_0 || (T) == TYPE_Q4_0))                                                   \
         ? QUANT_ROW4_BLOCKS(name, T, base, c, n)                                                                 \
         : ROW4(name, T, base, min((c), max(((n) - 1) >> 2, 0))))
#else
#define ROW4_CLAMPED(name, T, base, c, n) ROW4(name, T, base, min((c), max(((n) - 1) >> 2, 0)))
#endif
#define LOAD4(name, T, base, c, n) zeroPast(ROW4_CLAMPED(name, T, base, c, n), 4 * (c) < (n))
// LOAD4_ANY_TAIL is LOAD4 for rows whose slots past n the caller never
// uses (V rows: output slots past d_v are not stored): those slots read a
// copy of the row's last one, and the select is saved.
#define LOAD4_ANY_TAIL(name, T, base, c, n) ROW4_CLAMPED(name, T, base, c, n)
#else
// Indexes are clamped into the row so every load is in bounds.
#define AT_CLAMPED(name, T, base, i, n) ((i) < (n) ? AT(name, T, (base) + min((i), (n) - 1)) : 0.0)
#define LOAD4_ANY_TAIL LOAD4
#define LOAD4(name, T, base, c, n) vec4(AT_CLAMPED(name, T, base, 4 * (c), n), AT_CLAMPED(name, T, base, 4 * (c) + 1, n), \
                                        AT_CLAMPED(name, T, base, 4 * (c) + 2, n), AT_CLAMPED(name, T, base, 4 * (c) + 3, n))
#endif
