package pipelines

import (
	"encoding/binary"
	"math"
	"reflect"
)

// The parameter and push-constant blocks of the kernels, one Go struct
// per GLSL block: its fields are the block's members, in the GLSL order,
// named as in GLSL with the first letter upper-cased, typed int32, uint32,
// float32, [4]int32 (ivec4) or [4]float32 (vec4). The Go side fills the
// struct and encodes it with encodeBlock; TestBlocksMatchGLSL holds each
// struct to its GLSL declaration (names, types, order) and to the member
// offsets in every SPIR-V that uses it.

// linearParams is the std140 Params block of linear.comp and
// linear_coopmat.comp. Offsets and strides are in elements.
type linearParams struct {
	Dims [4]int32 // rows M, outputs N, inputs K, LFLAG_* bits
	X    [4]int32 // X element offset, row stride
	W    [4]int32 // W element offset, row stride
	Y    [4]int32 // Y element offset, row stride; bias element offset
}

// gradParams is the std140 Params block of linear_grad.comp.
type gradParams struct {
	Dims [4]int32 // M, N, K, GFLAG_* bits
	A    [4]int32 // A element offset, stride (k stride with GFLAG_A_ROWS, else row stride)
	B    [4]int32 // B element offset, k stride
	C    [4]int32 // C element offset, row stride
}

// regroupPush is the push-constant block of regroup.comp.
type regroupPush struct {
	N     [4]int32 // extents of i0, i1, i2, j
	Src   [4]int32 // element offset, strides of i0, i1, i2
	Dst   [4]int32 // element offset, strides of i0, i1, i2
	Flags int32    // RFLAG_* bits
}

// MergePush is the push-constant block of attention_merge.comp.
type MergePush struct {
	Pass, First                                   int32 // the pass (0 maximum, 1 sums, 2 O, 3 LSE); 1 for a pass's first part
	Heads, L, DV                                  int32 // rows are (B, Heads, L), DV wide
	Total, RowPitch                               int32 // rows or elements of the pass; invocations per grid row
	OOffset, OStrideB, OStrideH, OStrideL         int32 // the part's O: element offset and strides over (B, heads, L)
	LseOffset, LseStrideB, LseStrideH, LseStrideL int32 // the part's LSE, likewise
}

// Q8StorePush is the push-constant block of q8_store.comp.
type Q8StorePush struct {
	Heads, N, D                           int32 // rows are (B, Heads, N), D wide
	XOffset, XStrideB, XStrideH, XStrideN int32 // X's element offset and strides
	Blocks, Scales, RowPitch              int32 // blocks in all; Y's first scale (in halves); invocations per grid row
}

// RoPEPush is the push-constant block of rope.comp.
type RoPEPush struct {
	Heads, N, D, ROT                      int32 // rows are (B, Heads, N), D wide; ROT rotated elements
	Interleaved, FromLengths              int32 // 0 or 1
	XOffset, XStrideB, XStrideH, XStrideN int32
	Total, RowPitch                       int32 // elements in all; invocations per grid row
}

// HeadMeanPush is the push-constant block of head_mean.comp.
type HeadMeanPush struct {
	B, H, LS int32 // LS: L * S weights per head
}

// HeatColourPush is the push-constant block of heat_colour.comp, the
// viewer's colouring of weights.
type HeatColourPush struct {
	WOffset, WRow uint32 // the head's (L, S) weights: element offset, elements between rows
	VOffset, VRow uint32 // the value head's (S, d_v) rows, likewise
	L, S, Dv      uint32
	Mode          uint32 // 0: weights a_ij, 1: contributions a_ij * ||v_j||
	Pass          uint32
	Colours       uint32 // palette entries
}

// Bytes is the block's push-constant bytes.
func (p HeatColourPush) Bytes() []byte { return encodeBlock(p) }

// Bytes is the block's push-constant bytes.
func (p MergePush) Bytes() []byte { return encodeBlock(p) }

// Bytes is the block's push-constant bytes.
func (p Q8StorePush) Bytes() []byte { return encodeBlock(p) }

// Bytes is the block's push-constant bytes.
func (p RoPEPush) Bytes() []byte { return encodeBlock(p) }

// Bytes is the block's push-constant bytes.
func (p HeadMeanPush) Bytes() []byte { return encodeBlock(p) }

// blockLayout is where each field of the block struct type t lies, and
// the block's size in bytes: the offsets std140 and std430 (push
// constants) agree on for these member types: a 4-byte scalar at the next
// multiple of 4, an ivec4 or vec4 at the next multiple of 16.
func blockLayout(t reflect.Type) (offsets []int, size int) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i).Type
		align := 4
		if f.Kind() == reflect.Array {
			align = 16
		}
		size = (size + align - 1) / align * align
		offsets = append(offsets, size)
		size += int(f.Size())
	}
	return offsets, size
}

// blockSize is the bytes of a block struct's encoding.
func blockSize(block any) uint32 {
	_, size := blockLayout(reflect.TypeOf(block))
	return uint32(size)
}

// encodeBlock is a block struct's little-endian bytes, each field at its
// blockLayout offset (padding zero).
func encodeBlock(block any) []byte {
	v := reflect.ValueOf(block)
	offsets, size := blockLayout(v.Type())
	out := make([]byte, size)
	for i, at := range offsets {
		f := v.Field(i)
		if f.Kind() != reflect.Array {
			putScalar(out[at:], f)
			continue
		}
		for j := 0; j < f.Len(); j++ {
			putScalar(out[at+4*j:], f.Index(j))
		}
	}
	return out
}

// putScalar writes a 4-byte int32, uint32 or float32.
func putScalar(b []byte, v reflect.Value) {
	switch v.Kind() {
	case reflect.Int32:
		binary.LittleEndian.PutUint32(b, uint32(v.Int()))
	case reflect.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(v.Uint()))
	case reflect.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v.Float())))
	}
}
