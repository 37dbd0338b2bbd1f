package pipelines

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/vkattn/vkattn/core"
)

// ElementsGLSL is the text of shaders/elements.glsl, the kernels' side of
// core.QuantTypes: each quantized type's code, one dequantization
// function per type, the predicates loads.glsl picks a layout by, and
// the dispatch of q8_store.comp's per-type quantizers. It fails if the
// types' blocks differ: the kernels' block arithmetic takes one size.
func ElementsGLSL() (string, error) {
	block := core.QuantTypes[0].Block
	var b strings.Builder
	b.WriteString(`// Generated from core.QuantTypes by ` + "`go generate ./pipelines`" + `: do not edit.
// The block-quantized K/V element types, as loads.glsl reads them and
// q8_store.comp writes them (their TYPE_* codes are interface.glsl's): one
// dequantization function per type (a word of quants, unscaled), and
// which quant layout each has.
#ifndef VKATTN_ELEMENTS
#define VKATTN_ELEMENTS
`)
	if block&(block-1) != 0 {
		return "", fmt.Errorf("elements.glsl: blocks of %d: the kernels shift by the block's log2", block)
	}
	var byteTypes, nibbleTypes []string
	for _, q := range core.QuantTypes {
		if q.Block != block {
			return "", fmt.Errorf("elements.glsl: %s has blocks of %d, %s of %d: the kernels take one block size", q.Name, q.Block, core.QuantTypes[0].Name, block)
		}
		test := fmt.Sprintf("(T) == %s", typeCode(q))
		switch q.Layout {
		case core.QuantBytes:
			byteTypes = append(byteTypes, test)
		case core.QuantNibbles:
			nibbleTypes = append(nibbleTypes, test)
		}
	}
	fmt.Fprintf(&b, `
// Every quantized type's block: elements i and j share a scale when
// i >> QUANT_BLOCK_SHIFT == j >> QUANT_BLOCK_SHIFT.
const int QUANT_BLOCK = %d;
const int QUANT_BLOCK_SHIFT = %d;

// QUANT_BYTES(T): a quant a byte, four a word in element order.
// QUANT_NIBBLES(T): ggml's 16 bytes of nibbles per block, byte j holding
// element j (low nibble) and element j + 16 (high nibble).
#define QUANT_BYTES(T) (%s)
#define QUANT_NIBBLES(T) (%s)
#define IS_QUANT(T) (QUANT_BYTES(T) || QUANT_NIBBLES(T))

// dequant4_<type>(w, shift) is the four quants of word w, unscaled: bytes
// 0..3 (bytes), or the nibbles from bit shift of each byte (nibbles);
// dequant1_<type>(w, bit) is the quant at bit bit of w.
uvec4 nibbles4(uint w, int shift) { return (uvec4(w) >> uvec4(shift, shift + 8, shift + 16, shift + 24)) & 0xfu; }
`, block, bits.TrailingZeros(uint(block)), orFalse(byteTypes), orFalse(nibbleTypes))
	for _, q := range core.QuantTypes {
		writeDequant(&b, q)
	}
	b.WriteString("\n// dequant4 and dequant1 of the quantized type T (a specialization\n// constant: the driver keeps one branch).\n")
	writeByType(&b, "vec4 dequant4(uint w, int shift, int T)", "dequant4_%s(w, shift)")
	writeByType(&b, "float dequant1(uint w, int bit, int T)", "dequant1_%s(w, bit)")
	b.WriteString("\n// STORE_QUANT_BLOCK quantizes the block of X at base into element dst of\n// Y as type T, by q8_store.comp's function for T.\n#define STORE_QUANT_BLOCK(T, base, dst)")
	for i, q := range core.QuantTypes {
		if i > 0 {
			b.WriteString(" else")
		}
		fmt.Fprintf(&b, " if ((T) == %s) %s(base, dst);", typeCode(q), q.DeviceQuantizer)
	}
	b.WriteString("\n\n#endif\n")
	return b.String(), nil
}

// elementTypeNames are the TYPE_* codes of interface.glsl: the float
// types, then core.QuantTypes (K and V only).
func elementTypeNames() []glslName {
	names := []glslName{{"TYPE_F32", int(core.Float32), ""}, {"TYPE_F16", int(core.Float16), ""}, {"TYPE_BF16", int(core.BFloat16), ""}}
	for _, q := range core.QuantTypes {
		names = append(names, glslName{typeCode(q), int(q.DType), "K and V only"})
	}
	return names
}

// typeCode is q's GLSL type constant: TYPE_Q8_0.
func typeCode(q core.QuantType) string { return "TYPE_" + strings.ToUpper(q.Name) }

// orFalse joins tests with ||; false when there are none.
func orFalse(tests []string) string {
	if len(tests) == 0 {
		return "false"
	}
	return strings.Join(tests, " || ")
}

// writeDequant writes q's dequant4 and dequant1, by its kind.
func writeDequant(b *strings.Builder, q core.QuantType) {
	n := q.Name
	switch q.Dequant {
	case core.DequantInt8:
		fmt.Fprintf(b, "vec4 dequant4_%s(uint w, int shift) {\n    int x = int(w);\n    return vec4(bitfieldExtract(x, 0, 8), bitfieldExtract(x, 8, 8), bitfieldExtract(x, 16, 8), bitfieldExtract(x, 24, 8));\n}\n", n)
		fmt.Fprintf(b, "float dequant1_%s(uint w, int bit) { return float(bitfieldExtract(int(w), bit, 8)); }\n", n)
	case core.DequantOffset8:
		fmt.Fprintf(b, "vec4 dequant4_%s(uint w, int shift) { return vec4(ivec4(nibbles4(w, shift)) - 8); }\n", n)
		fmt.Fprintf(b, "float dequant1_%s(uint w, int bit) { return float(int(bitfieldExtract(w, bit, 4)) - 8); }\n", n)
	case core.DequantLevels:
		levels := make([]string, len(q.Levels))
		for i, l := range q.Levels {
			levels[i] = fmt.Sprintf("%d.0", l)
		}
		// The table lives in a function, so kernels that never read the
		// type carry none of it.
		fmt.Fprintf(b, "float level_%s(uint n) {\n    const float levels[%d] = float[%d](%s);\n    return levels[n];\n}\n", n, len(levels), len(levels), strings.Join(levels, ", "))
		fmt.Fprintf(b, "vec4 dequant4_%s(uint w, int shift) {\n    uvec4 n = nibbles4(w, shift);\n    return vec4(level_%[1]s(n.x), level_%[1]s(n.y), level_%[1]s(n.z), level_%[1]s(n.w));\n}\n", n)
		fmt.Fprintf(b, "float dequant1_%s(uint w, int bit) { return level_%[1]s(bitfieldExtract(w, bit, 4)); }\n", n)
	}
}

// writeByType writes function sig choosing among the types' calls (call
// is a format of the type's name), the last type the default.
func writeByType(b *strings.Builder, sig, call string) {
	fmt.Fprintf(b, "%s {\n    return ", sig)
	last := len(core.QuantTypes) - 1
	for _, q := range core.QuantTypes[:last] {
		fmt.Fprintf(b, "T == %s ? %s : ", typeCode(q), fmt.Sprintf(call, q.Name))
	}
	fmt.Fprintf(b, "%s;\n}\n", fmt.Sprintf(call, core.QuantTypes[last].Name))
}
