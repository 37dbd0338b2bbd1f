// Row loads shared by the kernels that read rows four elements at a time.
// Before including, a shader defines TEXEL_LOADS (inputs are uniform texel
// buffers) or not (std430 storage buffers), and VEC4_LOADS (rows are read
// four elements per load: widths, offsets and strides are multiples of 4)
// or not.
//
// Every input is read as raw words and widened to float32 here, by its
// element type (pipelines.DType): float32, float16, bfloat16 or (K and V)
// a quantized type (elements.glsl, generated from core.QuantTypes), a
// specialization constant per input, so one SPIR-V serves every mix of
// types and the driver folds the other branches away. Halves are
// read as packed 32-bit words (storage) or 16-bit texels (texel views),
// which needs no 16-bit storage feature: it runs on every Vulkan device.
//
// A quantized input holds its quants (elements.glsl's layouts: a byte per
// element, or ggml's 16 bytes of nibbles per block, blocks in element
// order) and, from half name_SCALES of its buffer on, one float16 scale
// per block of QUANT_BLOCK (32) elements; element i is the type's
// dequantization of its quant (dequant1/dequant4) times scale(i /
// QUANT_BLOCK), exact in float32. Only builds with QUANT_LOADS defined
// read them (the rest carry no quantized code, which lavapipe would spend
// compile time on); a shader defines name_SCALES for each input (0 where
// it is never quantized).
//
// INPUT(b, name) declares input name at binding b; LOAD4(name, T, base, c, n)
// is slot c (elements 4c..4c+3) of the row of width n that starts at
// element base of input name of type T; elements past the row read as zero.
// The float type codes (TYPE_F32, TYPE_F16, TYPE_BF16) are interface.glsl's,
// which the including shader includes first; the quantized ones,
// QUANT_BLOCK and the dequantization functions elements.glsl's.
#include "elements.glsl"

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

// QUANT_SCALE is the scale of element i's block of a quantized input
// whose scales start at half s. BYTES_AT is element i of an input of a
// byte layout, BYTES_ROW4 slot c of the row at base (a word of four quants
// of one block).
#define QUANT_HALF(name, h) (WORD(name, (h) >> 1) >> (((h) & 1) * 16))
#ifdef UNPACK_HALVES
#define SCALE16(h) unpackHalf2x16(h).x
#else
#define SCALE16(h) f16Bits(h)
#endif
#define QUANT_SCALE(name, s, i) SCALE16(QUANT_HALF(name, (s) + ((i) >> QUANT_BLOCK_SHIFT)))
#define BYTES_AT(name, T, s, i) (dequant1(WORD(name, (i) >> 2), ((i) & 3) * 8, T) * QUANT_SCALE(name, s, i))
#define BYTES_ROW4(name, T, s, base, c) (dequant4(WORD(name, ((base) >> 2) + (c)), 0, T) * QUANT_SCALE(name, s, (base) + 4 * (c)))

// NIBBLE_WORD is the word holding element i's nibble, NIBBLE_BIT its first
// bit: byte i & 15 of block i >> QUANT_BLOCK_SHIFT's four words, the high
// half for the block's elements 16..31. NIBBLES_AT is element i of an
// input of the nibble layout; NIBBLES_ROW4 slot c of the row at base (four
// elements of one block, in one word).
#define NIBBLE_WORD(i) ((((i) >> QUANT_BLOCK_SHIFT) << 2) + (((i) >> 2) & 3))
#define NIBBLE_BIT(i) ((((i) & 3) << 3) + (((i) >> 2) & 4))
#define NIBBLES_AT(name, T, s, i) (dequant1(WORD(name, NIBBLE_WORD(i)), NIBBLE_BIT(i), T) * QUANT_SCALE(name, s, i))
#define NIBBLES_ROW4(name, T, s, base, c) \
    (dequant4(WORD(name, NIBBLE_WORD((base) + 4 * (c))), NIBBLE_BIT((base) + 4 * (c)), T) * QUANT_SCALE(name, s, (base) + 4 * (c)))
#ifdef QUANT_LOADS
#define IF_QUANT(T, bytes, nibbles, other) (QUANT_BYTES(T) ? (bytes) : (QUANT_NIBBLES(T) ? (nibbles) : (other)))
#else
#define IF_QUANT(T, bytes, nibbles, other) (other)
#endif

#ifdef TEXEL_LOADS
// 32-bit inputs through R32UI / RGBA32UI views, halves through R16UI /
// RGBA16UI views, or RGBA32UI ones with HALVES8 (pipelines picks the view
// format by the element type and the plan).
#define INPUT(b, name) layout(binding = b) uniform usamplerBuffer name;
#ifdef VEC4_LOADS
#define WORD(name, w) texelFetch(name, (w) >> 2)[(w) & 3]
#define ROW4(name, T, base, c) IF_QUANT(T, BYTES_ROW4(name, T, name##_SCALES, base, c), NIBBLES_ROW4(name, T, name##_SCALES, base, c), \
                                       ((T) == TYPE_F32 ? uintBitsToFloat(texelFetch(name, ((base) >> 2) + (c)))          \
                                                        : widen16x4(texelFetch(name, ((base) >> 2) + (c)), T)))
#else
#define WORD(name, w) texelFetch(name, (w)).r
#define AT(name, T, i) IF_QUANT(T, BYTES_AT(name, T, name##_SCALES, i), NIBBLES_AT(name, T, name##_SCALES, i), \
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
#define ROW4(name, T, base, c) IF_QUANT(T, BYTES_ROW4(name, T, name##_SCALES, base, c), NIBBLES_ROW4(name, T, name##_SCALES, base, c), \
                                       ((T) == TYPE_F32 ? uintBitsToFloat(name[((base) >> 2) + (c)])                     \
                                                        : widen16x4(halves4(name##H[((base) >> 2) + (c)]), T)))
#else
// Element i of a half input is half (i & 1) of word i >> 1.
#define INPUT(b, name) layout(std430, binding = b) readonly buffer name##Words { uint name[]; };
#define WORD(name, w) name[(w)]
#define AT(name, T, i) IF_QUANT(T, BYTES_AT(name, T, name##_SCALES, i), NIBBLES_AT(name, T, name##_SCALES, i), \
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
// With QUANT_BLOCKS (the same kind of macro) quantized rows start and end
// on whole blocks of 32: the slots of a row that share a texel of quants
// (four of a byte layout, a block's eight of the nibble one) and the eight that share
// a block's scale use one clamped index each, so each is fetched once, not
// once a slot.
#ifndef QUANT_BLOCKS
#define QUANT_BLOCKS false
#endif
#ifdef QUANT_LOADS
// BLOCK_OF is the block of slot c of the row at base, clamped into the row.
#define BLOCK_OF(base, c, n) (((base) >> QUANT_BLOCK_SHIFT) + min((c) >> 3, max(((n) - 1) >> QUANT_BLOCK_SHIFT, 0)))
#define BYTES_ROW4_BLOCKS(name, T, s, base, c, n)                                                       \
    (dequant4(texelFetch(name, ((base) >> 4) + min((c) >> 2, max(((n) - 1) >> 4, 0)))[(c) & 3], 0, T) * \
     SCALE16(QUANT_HALF(name, (s) + BLOCK_OF(base, c, n))))
#define NIBBLES_ROW4_BLOCKS(name, T, s, base, c, n) \
    (dequant4(texelFetch(name, BLOCK_OF(base, c, n))[(c) & 3], (c) & 4, T) * SCALE16(QUANT_HALF(name, (s) + BLOCK_OF(base, c, n))))
#define QUANT_ROW4_BLOCKS(name, T, base, c, n)                                   \
    (QUANT_BYTES(T) ? BYTES_ROW4_BLOCKS(name, T, name##_SCALES, base, c, n) \
                    : NIBBLES_ROW4_BLOCKS(name, T, name##_SCALES, base, c, n))
#else
#define QUANT_ROW4_BLOCKS(name, T, base, c, n) vec4(0.0)
#endif
#define ROW4_CLAMPED(name, T, base, c, n)                                                                         \
    ((HALVES8 && ((T) == TYPE_F16 || (T) == TYPE_BF16))                                                           \
         ? widen16x4pair(texelFetch(name, ((base) >> 3) + min((c) >> 1, max(((n) - 1) >> 3, 0))), ((c) & 1) != 0, T) \
     : (QUANT_BLOCKS && IS_QUANT(T))                                                                              \
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
