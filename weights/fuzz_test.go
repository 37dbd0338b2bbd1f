package weights

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/vkattn/vkattn/internal/testutil"
)

// The fuzz targets check that no input panics and that whatever loads is
// self-consistent. `go test` runs their seeds; run one for longer with
//
//	go test ./weights -run '^$' -fuzz FuzzDecodeNPY -fuzztime 60s

// npySeeds are valid and malformed .npy files.
func npySeeds() [][]byte {
	ok := "'descr': '<f4', 'fortran_order': False"
	return [][]byte{
		f32NPY([]int{2, 3}, seq(6)),
		npyBytes(npyDict("<f8", false, 2), f64Bytes(0.5, -1e300)),
		npyBytes(npyDict("<f2", true, 2, 2), []byte{0, 0x3c, 1, 0, 0xff, 0x7b, 0, 0x7c}),
		npyBytes(npyDict(">f4", false, 1), []byte{0x3f, 0x80, 0, 0}),
		npyBytes(npyDict("|b1", true, 2, 2), []byte{1, 0, 2, 1}),
		npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f32Bytes(7)),
		npyBytes(npyDict("<f4", false, 0, 3), nil),
		npyBytes(npyDict("<i8", false, 1), make([]byte, 8)),
		npyV2(`{"shape": (1L,), "descr": "<f4", "fortran_order": False}`, f32Bytes(1)),
		npyBytes("{"+ok+", 'shape': (2,), ", f32Bytes(1, 2)),
		npyBytes("{"+ok+", 'shape': (2), }", f32Bytes(1, 2)),
		npyBytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", f32Bytes(1)),
		npyBytes(npyDict("<f4", false, 1<<20, 1<<20), nil),
		npyBytes(npyDict("<f4", false, 2), f32Bytes(1, 2, 3)),
		[]byte("\x93NUMPY\x02\x00\xff\xff\xff\xff{"),
		[]byte("\x93NUMPY\x01\x00\xff\x00{'descr'"),
		{},
	}
}

// checkArray checks what decodeNPY returned: values for exactly the
// supported dtypes, as many as the shape has.
func checkArray(t *testing.T, a *Array) {
	t.Helper()
	n := 1
	for _, s := range a.Shape {
		n *= s
	}
	_, supported := parseDescr(a.Descr)
	switch {
	case !supported && (a.F32 != nil || a.Bools != nil):
		t.Fatalf("values for dtype %q: %+v", a.Descr, a)
	case supported && (a.F32 == nil) == (a.Bools == nil):
		t.Fatalf("dtype %q: F32 %v, Bools %v", a.Descr, a.F32, a.Bools)
	case supported && len(a.F32)+len(a.Bools) != n:
		t.Fatalf("shape %v has %d elements, read %d", a.Shape, n, len(a.F32)+len(a.Bools))
	}
}

// FuzzDecodeNPY reads each input as a file and as a stream; the two must
// agree.
func FuzzDecodeNPY(f *testing.F) {
	for _, s := range npySeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, ferr := decodeNPY(bytes.NewReader(data), int64(len(data)), true)
		stream, serr := decodeNPY(bytes.NewReader(data), -1, false)
		if ferr == nil {
			checkArray(t, file)
		}
		if serr == nil {
			checkArray(t, stream)
		}
		// A stream's size is unknown, so only a dtype this package reads
		// (all of whose data is read) must fail or succeed alike.
		if ferr == nil && serr == nil && !sameArray(file, stream) {
			t.Fatalf("as a file %+v, as a stream %+v", file, stream)
		}
		if ferr == nil && serr != nil {
			t.Fatalf("loads as a file but not as a stream: %v", serr)
		}
	})
}

// sameArray compares arrays, float values by their bits (NaN included).
func sameArray(a, b *Array) bool {
	if !reflect.DeepEqual(a.Shape, b.Shape) || a.Descr != b.Descr || !slices.Equal(a.Bools, b.Bools) ||
		(a.F32 == nil) != (b.F32 == nil) || (a.Bools == nil) != (b.Bools == nil) || len(a.F32) != len(b.F32) {
		return false
	}
	for i := range a.F32 {
		if math.Float32bits(a.F32[i]) != math.Float32bits(b.F32[i]) {
			return false
		}
	}
	return true
}

// FuzzDecodeNPZ loads .npz archives (checkFile).
func FuzzDecodeNPZ(f *testing.F) {
	members := map[string][]byte{}
	for i, s := range npySeeds()[:8] { // the valid ones
		members[string(rune('a'+i))] = s
	}
	f.Add(testutil.NPZ(members, false))
	f.Add(testutil.NPZ(members, true))
	for _, s := range npySeeds()[8:] {
		f.Add(testutil.NPZ(map[string][]byte{"x": s}, true))
	}
	for _, name := range []string{"self.npz", "self_params.npz", "padcausal.npz"} {
		if b, err := os.ReadFile(filepath.Join("..", "testdata", "mha", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("PK\x05\x06" + string(make([]byte, 18))))
	f.Fuzz(checkFile)
}

// FuzzDecodeSafetensors loads .safetensors files (checkFile).
func FuzzDecodeSafetensors(f *testing.F) {
	f.Add(stBytes(map[string]stTensor{
		"a":    {"F32", []int{2, 3}, f32Bytes(seq(6)...)},
		"dbl":  {"F64", []int{1}, f64Bytes(0.1)},
		"half": {"F16", []int{2}, []byte{0x01, 0x00, 0x00, 0xfc}},
		"bf":   {"BF16", []int{2}, []byte{0x80, 0x3f, 0x40, 0xc0}},
		"mask": {"BOOL", []int{3}, []byte{1, 0, 1}},
		"ints": {"I64", []int{2}, make([]byte, 16)},
	}))
	hdr := func(s string) []byte { return []byte(s) }
	for _, b := range [][]byte{
		{},
		stRaw(hdr(`{"a":`), nil),
		stRaw(hdr(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`), make([]byte, 4)),
		stRaw(hdr(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`), nil),
		stRaw(hdr(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]}}`), []byte{1}),
		stBytes(map[string]stTensor{"a": {"F64", []int{1}, f64Bytes(1e300)}}),
	} {
		f.Add(b)
	}
	if b, err := os.ReadFile(filepath.Join("..", "testdata", "mha", "self_params.safetensors")); err == nil {
		f.Add(b)
	}
	f.Fuzz(checkFile)
}

// checkFile opens data as a weights file and reads it both ways: every
// tensor at once (ReadAll, what Load does) and one at a time, as the layer
// builders do, header (Info) then data (Read). The two must agree: ReadAll
// succeeds exactly when every Read does, with the same tensors, each
// matching its Info. The layer builders must not panic on it either.
func checkFile(t *testing.T, data []byte) {
	f, err := newFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		if f != nil {
			t.Fatalf("a File returned with error %v", err)
		}
		return
	}
	all, allErr := f.ReadAll()
	if allErr != nil && all != nil {
		t.Fatalf("tensors returned with error %v", allErr)
	}
	if allErr == nil {
		checkTensors(t, all)
	}
	lazy, err := newFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("opens once, then fails: %v", err)
	}
	if !slices.Equal(lazy.Names(), f.Names()) {
		t.Fatalf("names %v, then %v", f.Names(), lazy.Names())
	}
	failed := false
	for _, name := range lazy.Names() {
		info, infoErr := lazy.Info(name)
		x, err := lazy.Read(name)
		if err != nil {
			failed = true
			continue
		}
		if infoErr != nil {
			t.Fatalf("%s reads, but its header does not: %v", name, infoErr)
		}
		if !reflect.DeepEqual(info.Shape, x.Shape) || info.DType != x.DType {
			t.Fatalf("%s: Info %+v, Read %v %s", name, info, x.Shape, x.DType)
		}
		if allErr == nil && !sameTensor(all[name], x) {
			t.Fatalf("%s: ReadAll %+v, Read %+v", name, all[name], x)
		}
	}
	if failed != (allErr != nil) {
		t.Fatalf("ReadAll: %v, but a Read failed: %v", allErr, failed)
	}
	for _, d := range []int{1, 8} { // 8: the parity cases' width
		fresh, _ := newFile(bytes.NewReader(data), int64(len(data)))
		fresh.MHA("", d, 0, 0)
		fresh.Additive("", d, d)
	}
}

// sameTensor compares tensors, values by their bits (NaN included).
func sameTensor(a, b Tensor) bool {
	if !reflect.DeepEqual(a.Shape, b.Shape) || a.DType != b.DType || (a.Data == nil) != (b.Data == nil) || len(a.Data) != len(b.Data) {
		return false
	}
	for i := range a.Data {
		if math.Float32bits(a.Data[i]) != math.Float32bits(b.Data[i]) {
			return false
		}
	}
	return true
}

// checkTensors checks that each tensor with data has as many values as its
// shape.
func checkTensors(t *testing.T, ts map[string]Tensor) {
	t.Helper()
	for name, x := range ts {
		n := 1
		for _, s := range x.Shape {
			n *= s
		}
		if x.Data != nil && len(x.Data) != n {
			t.Fatalf("%s: shape %v, %d values", name, x.Shape, len(x.Data))
		}
	}
}
