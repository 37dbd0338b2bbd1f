package weights

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/testutil"
)

// halfValue is the exact value of IEEE 754 binary16 bits h.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0: // zero or subnormal
		return sign * frac * 0x1p-24
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * (1024 + frac) * math.Ldexp(1, exp-25)
}

// TestFloat16Exact loads every binary16 value from .npz (<f2 and >f2) and
// .safetensors (F16): each widens exactly, subnormals, ±0 and ±inf
// included (issue 12: .npz refused <f2; npyio's conversion, used for F16
// before, flushed subnormals to the wrong values).
func TestFloat16Exact(t *testing.T) {
	le := make([]byte, 2<<16)
	be := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(le[2*i:], uint16(i))
		binary.BigEndian.PutUint16(be[2*i:], uint16(i))
	}
	ts := mustLoad(t, writeFile(t, "w.npz", testutil.NPZ(map[string][]byte{
		"le": npyBytes(npyDict("<f2", false, 1<<16), le),
		"be": npyBytes(npyDict(">f2", false, 1<<16), be),
	}, true)))
	st := mustLoad(t, writeFile(t, "h.safetensors", stBytes(map[string]stTensor{"h": {"F16", []int{1 << 16}, le}})))
	for name, x := range map[string]Tensor{"npz <f2": ts["le"], "npz >f2": ts["be"], "safetensors F16": st["h"]} {
		if x.DType != "F16" || len(x.Data) != 1<<16 {
			t.Fatalf("%s: dtype %s, %d values", name, x.DType, len(x.Data))
		}
		for i, got := range x.Data {
			want := halfValue(uint16(i))
			if math.IsNaN(want) {
				if !math.IsNaN(float64(got)) {
					t.Fatalf("%s: %#04x is %g, want NaN", name, i, got)
				}
				continue
			}
			if math.Float32bits(got) != math.Float32bits(float32(want)) {
				t.Fatalf("%s: %#04x is %g, want %g", name, i, got, want)
			}
		}
	}
	// The values the issue names, spelled out.
	for bits, want := range map[uint16]float32{
		0x0001: 0x1p-24, 0x03ff: 1023 * 0x1p-24, 0x0400: 0x1p-14, 0x7bff: 65504, 0xfbff: -65504,
		0x7c00: float32(math.Inf(1)), 0xfc00: float32(math.Inf(-1)), 0x3c00: 1,
	} {
		if got := ts["le"].Data[bits]; got != want {
			t.Errorf("%#04x is %g, want %g", bits, got, want)
		}
	}
	if z := ts["le"].Data[0x8000]; z != 0 || !math.Signbit(float64(z)) {
		t.Errorf("0x8000 is %g, want -0", z)
	}
}

// MHA weights stored as float16 in a .npz load like float32 ones; an
// infinity is refused by the layer as any non-finite weight is.
func TestLoadMHAFloat16(t *testing.T) {
	ts := mhaTensors(4, 3, 2, false, true)
	f32, f16 := map[string][]byte{}, map[string][]byte{}
	for name, x := range ts {
		f32[name] = f32NPY(x.Shape, x.Data)
		f16[name] = halfNPY(x.Shape, x.Data)
	}
	want, err := LoadMHA(writeFile(t, "w.npz", testutil.NPZ(f32, false)), 4, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadMHA(writeFile(t, "w.npz", testutil.NPZ(f16, true)), 4, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The same values, kept as float16 on the device.
	if got.DType != core.Float16 || want.DType != core.Float32 {
		t.Fatalf("element types %v and %v, want f16 and f32", got.DType, want.DType)
	}
	want.DType = core.Float16
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("float16 weights %+v\nwant %+v", got, want)
	}
	bias := append([]float32(nil), ts["out_proj.bias"].Data...)
	bias[1] = float32(math.Inf(-1))
	f16["out_proj.bias"] = halfNPY(ts["out_proj.bias"].Shape, bias)
	if _, err := LoadMHA(writeFile(t, "w.npz", testutil.NPZ(f16, true)), 4, 3, 2); !errors.Is(err, core.ErrNonFinite) || !strings.Contains(err.Error(), "out_proj.bias value 1") {
		t.Fatalf("float16 -inf bias: %v", err)
	}
}

// halfNPY is a little-endian float16 .npy; xs must be exact in float16.
func halfNPY(shape []int, xs []float32) []byte {
	raw := make([]byte, 2*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint16(raw[2*i:], float16.Fromfloat32(x).Bits())
	}
	return npyBytes(npyDict("<f2", false, shape...), raw)
}

// A float16 .npy keeps its bit patterns (row-major, Fortran order
// reordered) beside their widening.
func TestReadNPYKeepsFloat16Bits(t *testing.T) {
	// (2, 3) in Fortran order: column-major bits 1..6 of the halves below.
	bits := []uint16{0x3c00, 0x0001, 0x8400, 0x7bff, 0x3555, 0xc000} // column-major
	raw := make([]byte, 2*len(bits))
	for i, h := range bits {
		binary.LittleEndian.PutUint16(raw[2*i:], h)
	}
	a, err := ReadNPY(writeFile(t, "h.npy", npyBytes(npyDict("<f2", true, 2, 3), raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := []uint16{0x3c00, 0x8400, 0x3555, 0x0001, 0x7bff, 0xc000} // row-major
	if !reflect.DeepEqual(a.F16, want) {
		t.Fatalf("F16 = %#04x, want %#04x", a.F16, want)
	}
	for i, h := range want {
		if a.F32[i] != float16.Frombits(h).Float32() {
			t.Fatalf("F32[%d] = %g, want the widening of %#04x", i, a.F32[i], h)
		}
	}
}
