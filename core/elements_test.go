package core

import "testing"

// Each row of QuantTypes is consistent with itself and with ggml's block
// sizes (sizeof block_q8_0 = 34, block_q4_0 = block_iq4_nl = 18 bytes per
// 32 values): its name parses back to its type, its storage is whole
// blocks of quants and a scale, its quantizer's outputs have the sizes
// the storage says, and a level table exactly where its kind reads one.
func TestQuantTypesTable(t *testing.T) {
	ggmlBlockBytes := map[string]int{"q8_0": 34, "q4_0": 18, "iq4_nl": 18}
	if len(QuantTypes) != len(ggmlBlockBytes) {
		t.Fatalf("%d quantized types; this test knows %d", len(QuantTypes), len(ggmlBlockBytes))
	}
	for _, q := range QuantTypes {
		if got, err := ParseDType(q.Name); err != nil || got != q.DType || q.DType.String() != q.Name {
			t.Errorf("%s: parses as %v (%v), prints as %v", q.Name, got, err, q.DType)
		}
		if !q.DType.Quantized() || q.DType.Valid() || !q.DType.ValidKV() {
			t.Errorf("%s: Quantized %v, Valid %v, ValidKV %v", q.Name, q.DType.Quantized(), q.DType.Valid(), q.DType.ValidKV())
		}
		if q.BlockBytes() != ggmlBlockBytes[q.Name] || q.DType.StorageBytes(3*q.Block) != 3*ggmlBlockBytes[q.Name] {
			t.Errorf("%s: %d bytes a block, %d for three; ggml's block is %d", q.Name, q.BlockBytes(), q.DType.StorageBytes(3*q.Block), ggmlBlockBytes[q.Name])
		}
		if (q.Layout == QuantNibbles) != (q.QuantBits == 4) || (q.Dequant == DequantLevels) != (len(q.Levels) == 16) {
			t.Errorf("%s: layout %v with %d-bit quants, dequantization %v with %d levels", q.Name, q.Layout, q.QuantBits, q.Dequant, len(q.Levels))
		}
		data := make([]float32, 2*q.Block)
		for i := range data {
			data[i] = float32(i%7) - 3
		}
		quants, scales, err := q.Quantize(data)
		if err != nil || len(quants) != q.QuantBytes(len(data)) || len(scales) != 2 || len(q.Dequantize(quants, scales)) != len(data) {
			t.Errorf("%s: two blocks quantize to %d quant bytes and %d scales (%v)", q.Name, len(quants), len(scales), err)
		}
	}
}
