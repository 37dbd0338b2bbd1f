package core

// The block-quantized K/V element types as data: one row of QuantTypes per
// type says everything the rest of the code asks of it (block size,
// storage, how the kernels read a block, how the device writes one, the
// host's quantizer). `go generate ./pipelines` writes the kernels' side,
// shaders/elements.glsl, from this table.

// QuantLayout is how a block's quants lie in a buffer: the kernels'
// address arithmetic depends on it, not on the type.
type QuantLayout int

const (
	// QuantBytes: a byte per element, in element order.
	QuantBytes QuantLayout = iota + 1
	// QuantNibbles: ggml's 16 bytes per block of 32, byte j holding
	// element j in its low nibble and element j+16 in its high one.
	QuantNibbles
)

// Dequant is how a quant becomes a value before the block's scale
// multiplies it: the kind each generated GLSL dequantization function is
// written from.
type Dequant int

const (
	DequantInt8    Dequant = iota + 1 // the quant is a signed byte
	DequantOffset8                    // the nibble minus 8
	DequantLevels                     // Levels[nibble], a fixed table
)

// QuantType is one block-quantized K/V element type: quants, then one
// float16 scale per block after all of a tensor's quants.
type QuantType struct {
	DType DType
	Name  string // as ParseDType reads it and the CLI lists it
	Block int    // elements per block
	// QuantBits is the bits of one quant (8 or 4).
	QuantBits int
	Layout    QuantLayout
	Dequant   Dequant
	// Levels are the values of the 16 nibbles (DequantLevels only).
	Levels []int8
	// DeviceQuantizer is the function of shaders/q8_store.comp that
	// quantizes one block into this type (cache appends on the device).
	DeviceQuantizer string
	// SafeMagnitude: every block whose values are all below it in
	// magnitude quantizes with a finite float16 scale.
	SafeMagnitude float64
	// Quantize turns whole blocks of data into quants (Layout's bytes)
	// and scales, bit for bit as ggml's reference does; Dequantize is
	// their values, exact in float32.
	Quantize   func(data []float32) (quants []byte, scales []uint16, err error)
	Dequantize func(quants []byte, scales []uint16) []float32
	// About is a line for docs and help: what the type is.
	About string
}

// QuantTypes is every block-quantized K/V element type, in DType order.
var QuantTypes = []QuantType{
	{DType: Q8_0, Name: "q8_0", Block: Q8Block, QuantBits: 8, Layout: QuantBytes, Dequant: DequantInt8,
		DeviceQuantizer: "quantizeQ8_0", SafeMagnitude: 65504 * 127,
		Quantize: quantizeQ8_0Bytes, Dequantize: dequantizeQ8_0Bytes,
		About: "ggml's 8-bit blocks of 32: an int8 times the block's float16 scale"},
	{DType: Q4_0, Name: "q4_0", Block: Q4Block, QuantBits: 4, Layout: QuantNibbles, Dequant: DequantOffset8,
		DeviceQuantizer: "quantizeQ4_0", SafeMagnitude: 65504 * 8,
		Quantize: QuantizeQ4_0, Dequantize: DequantizeQ4_0,
		About: "ggml's 4-bit blocks of 32: (nibble - 8) times the block's float16 scale"},
	{DType: IQ4_NL, Name: "iq4_nl", Block: IQ4NLBlock, QuantBits: 4, Layout: QuantNibbles, Dequant: DequantLevels,
		Levels: IQ4NLLevels, DeviceQuantizer: "quantizeIQ4_NL", SafeMagnitude: iq4NLSafe,
		Quantize: QuantizeIQ4NL, Dequantize: DequantizeIQ4NL,
		About: "ggml's 4-bit non-linear blocks of 32: a level of a fixed 16-entry table times the block's float16 scale"},
}

// Quant is t's row of QuantTypes; ok is false for a float type.
func (t DType) Quant() (q QuantType, ok bool) {
	for _, q := range QuantTypes {
		if q.DType == t {
			return q, true
		}
	}
	return QuantType{}, false
}

// QuantBytes is the bytes of the quants of n elements (whole blocks).
func (q QuantType) QuantBytes(n int) int { return n * q.QuantBits / 8 }

// BlockBytes is the bytes one block takes: its quants and its scale.
func (q QuantType) BlockBytes() int { return q.QuantBytes(q.Block) + 2 }

// QuantBlockMultiple is a row width every quantized type's blocks divide:
// the kernels and the cache ask rows of whole blocks of every type.
func QuantBlockMultiple() int {
	m := 1
	for _, q := range QuantTypes {
		m = lcm(m, q.Block)
	}
	return m
}

func lcm(a, b int) int {
	g, r := a, b
	for r != 0 {
		g, r = r, g%r
	}
	return a / g * b
}

// QuantNames lists the quantized types' names, for messages and help.
func QuantNames() []string {
	var s []string
	for _, q := range QuantTypes {
		s = append(s, q.Name)
	}
	return s
}

// quantizeQ8_0Bytes is QuantizeQ8_0 with the quants as bytes (two's
// complement), as a buffer holds them.
func quantizeQ8_0Bytes(data []float32) ([]byte, []uint16, error) {
	q, scales, err := QuantizeQ8_0(data)
	if err != nil {
		return nil, nil, err
	}
	raw := make([]byte, len(q))
	for i, x := range q {
		raw[i] = byte(x)
	}
	return raw, scales, nil
}

// dequantizeQ8_0Bytes is DequantizeQ8_0 of quants held as bytes; as many
// whole blocks as both quants and scales hold.
func dequantizeQ8_0Bytes(quants []byte, scales []uint16) []float32 {
	n := min(len(quants)/Q8Block, len(scales)) * Q8Block
	q := make([]int8, n)
	for i := range q {
		q[i] = int8(quants[i])
	}
	return DequantizeQ8_0(q, scales)
}
