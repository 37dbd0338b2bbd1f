package core

import "github.com/x448/float16"

// IQ4NLLevels are iq4_nl's 16 values (ggml's kvalues_iq4nl): element
// values are a level times the block's float16 scale.
var IQ4NLLevels = []int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// iq4NLSafe bounds a block's largest |x| below which its scale fits
// float16: the scale is a weighted mean of x/level over the block, at
// most 1.123 amax/127 (iq4nl_test.go), and 112*1.123 < 127.
const iq4NLSafe = 65504 * 112

// iq4NLEps is ggml's GROUP_MAX_EPS: a block whose largest |x| is below it
// has the scale 0.
const iq4NLEps = float32(1e-15)

// QuantizeIQ4NL quantizes data, whole blocks of 32 values, as ggml's
// quantize_row_iq4_nl_ref does (quantize_row_iq4_nl_impl with no
// importance weights and ntry = -1), bit for bit, each step rounded to
// float32 and never fused: per block, max is the first element of largest
// |x|; d = max / -127 and id = 1/d; each element's index is the level
// nearest to id*x (a tie takes the upper level); with weights x*x,
// sumqx = Σ (w*q)*x and sumq2 = Σ (w*q)*q in element order, and the scale
// sumqx / sumq2 (0 unless sumq2 > 0), stored as the nearest float16 (ties
// to even, subnormals kept). A block whose largest |x| is below 1e-15
// (ggml's GROUP_MAX_EPS) has scale 0 and indices 0 (ggml leaves its index
// array as the previous block left it there; every value is 0 either
// way). quants are 16 bytes a block, element j's index in the low nibble
// of byte j, element j+16's in the high one. A NaN or Inf is
// ErrNonFinite; a block whose scale rounds beyond float16's range, or
// whose float32 sums overflow, ErrOverflow (never below SafeMagnitude); a
// length that is not whole blocks ErrShape.
func QuantizeIQ4NL(data []float32) (quants []byte, scales []uint16, err error) {
	const block = IQ4NLBlock
	if len(data)%block != 0 {
		return nil, nil, Errorf(ErrShape, "iq4_nl holds blocks of %d values; %d values are not whole blocks", block, len(data))
	}
	quants = make([]byte, len(data)/2)
	scales = make([]uint16, len(data)/block)
	var idx [block]byte
	for b := range scales {
		x := data[b*block : (b+1)*block]
		amax, top, err := blockPeak(x, b*block)
		if err != nil {
			return nil, nil, err
		}
		scale := iq4NLBlock(x, amax, top, &idx)
		// Past about 1.4e12 the float32 sums overflow: the scale is then
		// Inf or NaN, refused as a scale past float16's range is.
		h := float16.Fromfloat32(scale)
		if !Finite32(scale) || h.IsInf(0) {
			return nil, nil, Errorf(ErrOverflow, "iq4_nl block %d: scale %g is beyond float16 (a block's |x| below %d always fits)", b, scale, iq4NLSafe)
		}
		scales[b] = h.Bits()
		for j := range block / 2 {
			quants[b*block/2+j] = idx[j] | idx[j+block/2]<<4
		}
	}
	return quants, scales, nil
}

// iq4NLBlock is the scale of block x (amax its largest |x|, top that
// element's value) and its indices, in idx.
func iq4NLBlock(x []float32, amax, top float32, idx *[IQ4NLBlock]byte) float32 {
	*idx = [IQ4NLBlock]byte{}
	if amax < iq4NLEps {
		return 0
	}
	d := top / float32(IQ4NLLevels[0])
	id := 1 / d
	var sumqx, sumq2 float32
	for j, v := range x {
		l := iq4NLNearest(float32(id * v))
		idx[j] = l
		q := float32(IQ4NLLevels[l])
		wq := float32(float32(v*v) * q)
		sumqx = float32(sumqx + float32(wq*v))
		sumq2 = float32(sumq2 + float32(wq*q))
	}
	if sumq2 > 0 {
		return sumqx / sumq2
	}
	return 0
}

// iq4NLNearest is the index of the level nearest to v, the upper one of
// two equally near: the last level whose midpoint with the one below it v
// reaches (2v and the sum of two levels are exact).
func iq4NLNearest(v float32) byte {
	var l byte
	for i := 1; i < len(IQ4NLLevels); i++ {
		if 2*float64(v) >= float64(IQ4NLLevels[i-1])+float64(IQ4NLLevels[i]) {
			l = byte(i)
		}
	}
	return l
}

// DequantizeIQ4NL is the values of iq4_nl blocks: the level of each
// nibble times the block's float16 scale, exact in float32; as many whole
// blocks as both quants and scales hold.
func DequantizeIQ4NL(quants []byte, scales []uint16) []float32 {
	return dequantizeNibbles(quants, scales, IQ4NLBlock, func(q byte) float32 { return float32(IQ4NLLevels[q]) })
}
