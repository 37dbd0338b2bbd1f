// Generated from core.QuantTypes by `go generate ./pipelines`: do not edit.
// The block-quantized K/V element types, as loads.glsl reads them and
// q8_store.comp writes them (their TYPE_* codes are interface.glsl's): one
// dequantization function per type (a word of quants, unscaled), and
// which quant layout each has.
#ifndef VKATTN_ELEMENTS
#define VKATTN_ELEMENTS

// Every quantized type's block: elements i and j share a scale when
// i >> QUANT_BLOCK_SHIFT == j >> QUANT_BLOCK_SHIFT.
const int QUANT_BLOCK = 32;
const int QUANT_BLOCK_SHIFT = 5;

// QUANT_BYTES(T): a quant a byte, four a word in element order.
// QUANT_NIBBLES(T): ggml's 16 bytes of nibbles per block, byte j holding
// element j (low nibble) and element j + 16 (high nibble).
#define QUANT_BYTES(T) ((T) == TYPE_Q8_0)
#define QUANT_NIBBLES(T) ((T) == TYPE_Q4_0 || (T) == TYPE_IQ4_NL)
#define IS_QUANT(T) (QUANT_BYTES(T) || QUANT_NIBBLES(T))

// dequant4_<type>(w, shift) is the four quants of word w, unscaled: bytes
// 0..3 (bytes), or the nibbles from bit shift of each byte (nibbles);
// dequant1_<type>(w, bit) is the quant at bit bit of w.
uvec4 nibbles4(uint w, int shift) { return (uvec4(w) >> uvec4(shift, shift + 8, shift + 16, shift + 24)) & 0xfu; }
vec4 dequant4_q8_0(uint w, int shift) {
    int x = int(w);
    return vec4(bitfieldExtract(x, 0, 8), bitfieldExtract(x, 8, 8), bitfieldExtract(x, 16, 8), bitfieldExtract(x, 24, 8));
}
float dequant1_q8_0(uint w, int bit) { return float(bitfieldExtract(int(w), bit, 8)); }
vec4 dequant4_q4_0(uint w, int shift) { return vec4(ivec4(nibbles4(w, shift)) - 8); }
float dequant1_q4_0(uint w, int bit) { return float(int(bitfieldExtract(w, bit, 4)) - 8); }
float level_iq4_nl(uint n) {
    const float levels[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
    return levels[n];
}
vec4 dequant4_iq4_nl(uint w, int shift) {
    uvec4 n = nibbles4(w, shift);
    return vec4(level_iq4_nl(n.x), level_iq4_nl(n.y), level_iq4_nl(n.z), level_iq4_nl(n.w));
}
float dequant1_iq4_nl(uint w, int bit) { return level_iq4_nl(bitfieldExtract(w, bit, 4)); }

// dequant4 and dequant1 of the quantized type T (a specialization
// constant: the driver keeps one branch).
vec4 dequant4(uint w, int shift, int T) {
    return T == TYPE_Q8_0 ? dequant4_q8_0(w, shift) : T == TYPE_Q4_0 ? dequant4_q4_0(w, shift) : dequant4_iq4_nl(w, shift);
}
float dequant1(uint w, int bit, int T) {
    return T == TYPE_Q8_0 ? dequant1_q8_0(w, bit) : T == TYPE_Q4_0 ? dequant1_q4_0(w, bit) : dequant1_iq4_nl(w, bit);
}

// STORE_QUANT_BLOCK quantizes the block of X at base into element dst of
// Y as type T, by q8_store.comp's function for T.
#define STORE_QUANT_BLOCK(T, base, dst) if ((T) == TYPE_Q8_0) quantizeQ8_0(base, dst); else if ((T) == TYPE_Q4_0) quantizeQ4_0(base, dst); else if ((T) == TYPE_IQ4_NL) quantizeIQ4_NL(base, dst);

#endif
