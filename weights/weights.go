// Package weights reads named weight tensors from .npz (NumPy) and
// .safetensors files, and assembles from them the parameters of PyTorch's
// nn.MultiheadAttention and of additive (Bahdanau) attention.
//
// Values come back as float32: float64 is rounded (a finite value float32
// cannot hold is an error), float16 and bfloat16 widened, bool read as 0
// and 1. Any malformed or truncated file is an error wrapping ErrFormat,
// never a panic.
package weights

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"codeberg.org/sbinet/npyio/npy"
	"codeberg.org/sbinet/npyio/npy/float16"
	"codeberg.org/sbinet/npyio/npz"
	"github.com/nlpodyssey/safetensors"
)

var (
	// ErrFormat: the file is not a readable .npz or .safetensors file.
	ErrFormat = errors.New("weights: malformed file")
	// ErrMissing: a tensor the layer needs is not in the file.
	ErrMissing = errors.New("weights: missing tensor")
	// ErrUnsupported: the file holds something this package cannot use,
	// such as an integer dtype where a weight is needed.
	ErrUnsupported = errors.New("weights: unsupported")
)

// Tensor is one named array of a weights file.
type Tensor struct {
	// Shape as stored; empty for a scalar.
	Shape []int
	// DType is "F32", "F64", "F16", "BF16" or "BOOL" (safetensors' names,
	// also used for .npz) for the types Data holds; for any other type it
	// is the file's own name for it ("I64", "<i8", ...) and Data is nil.
	DType string
	// Data is row-major, Fortran-ordered arrays reordered.
	Data []float32
}

// maxElements bounds one tensor, so a header claiming a huge shape fails
// cleanly; the GPU could not take more than 2^31 elements in a buffer.
const maxElements = math.MaxInt32

// Load reads every tensor of a .npz or .safetensors file, told apart by
// their content (a zip archive is .npz), not by the file name. .npz member
// names lose their ".npy" suffix, as numpy.load shows them.
func Load(path string) (map[string]Tensor, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ts, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, nil
}

// decode reads the content of a .npz (a zip archive) or .safetensors file.
func decode(data []byte) (map[string]Tensor, error) {
	if bytes.HasPrefix(data, []byte("PK\x03\x04")) || bytes.HasPrefix(data, []byte("PK\x05\x06")) {
		return decodeNPZ(data)
	}
	return decodeSafetensors(data)
}

// formatErr wraps ErrFormat with a description.
func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

func decodeNPZ(data []byte) (ts map[string]Tensor, err error) {
	// Neither library below should panic on bad input, but a weights file
	// is untrusted: any panic becomes an error.
	defer func() {
		if r := recover(); r != nil {
			ts, err = nil, formatErr("not a valid .npz file (%v)", r)
		}
	}()
	zr, err := npz.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, formatErr("not a valid .npz file: %v", err)
	}
	ts = make(map[string]Tensor, len(zr.Keys()))
	for _, key := range zr.Keys() {
		name := strings.TrimSuffix(key, ".npy")
		if _, dup := ts[name]; dup {
			return nil, formatErr("array %q appears twice", name)
		}
		rc, err := zr.Open(key)
		if err != nil {
			return nil, formatErr("array %q: %v", name, err)
		}
		// ReadAll grows with the data actually decompressed, and the zip
		// reader checks the CRC at the end, so truncation is caught here.
		b, err := io.ReadAll(io.LimitReader(rc, 1<<16+8*maxElements+1))
		rc.Close()
		if err != nil {
			return nil, formatErr("array %q: %v", name, err)
		}
		t, err := decodeNPY(b)
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", name, err)
		}
		ts[name] = t
	}
	return ts, nil
}

// decodeNPY parses one .npy member. npyio parses the header and the data;
// the preamble, header and data size are checked here first, because npyio
// trusts them (a truncated header would make it index out of range).
func decodeNPY(data []byte) (t Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = Tensor{}, formatErr("malformed .npy header (%v)", r)
		}
	}()
	if len(data) < 10 || string(data[:6]) != "\x93NUMPY" {
		return t, formatErr("missing the \\x93NUMPY magic")
	}
	var hdrEnd int
	switch data[6] {
	case 1:
		hdrEnd = 10 + int(binary.LittleEndian.Uint16(data[8:10]))
	case 2:
		if len(data) < 12 {
			return t, formatErr("truncated .npy header")
		}
		hdrEnd = 12 + int(binary.LittleEndian.Uint32(data[8:12]))
	default:
		return t, formatErr(".npy format version %d.%d is not supported", data[6], data[7])
	}
	if hdrEnd > len(data) || hdrEnd < 0 {
		return t, formatErr(".npy header is truncated")
	}
	if bytes.IndexByte(data[:hdrEnd], '\n') < 0 || bytes.IndexByte(data[:hdrEnd], '}') < 0 {
		return t, formatErr(".npy header is not a dictionary ending in a newline")
	}
	r, err := npy.NewReader(bytes.NewReader(data))
	if err != nil {
		return t, formatErr("%v", err)
	}
	h := r.Header.Descr
	t.Shape = h.Shape
	if t.Shape == nil {
		t.Shape = []int{}
	}
	n, err := elements(t.Shape)
	if err != nil {
		return t, err
	}
	descr := strings.Trim(h.Type, `'" `)
	var size int
	switch descr {
	case "<f4", ">f4", "=f4":
		t.DType, size = "F32", 4
	case "<f8", ">f8", "=f8":
		t.DType, size = "F64", 8
	case "|b1", "b1", "?":
		t.DType, size = "BOOL", 1
	default:
		t.DType = descr
		return t, nil // kept, without data: only a weight that needs it fails.
	}
	if got := int64(len(data) - hdrEnd); got != int64(n)*int64(size) {
		return t, formatErr("shape %v of %s needs %d data bytes, the array has %d", t.Shape, descr, int64(n)*int64(size), got)
	}
	switch size {
	case 4:
		t.Data = make([]float32, 0, n)
		if n > 0 {
			err = r.Read(&t.Data)
		}
	case 8:
		var f64 []float64
		if n > 0 {
			err = r.Read(&f64)
		}
		if err == nil {
			t.Data, err = Narrow(f64)
		}
	case 1:
		var bs []bool
		if n > 0 {
			err = r.Read(&bs)
		}
		t.Data = make([]float32, len(bs))
		for i, b := range bs {
			if b {
				t.Data[i] = 1
			}
		}
	}
	if err != nil {
		return t, formatErr("%v", err)
	}
	if len(t.Data) != n {
		return t, formatErr("read %d values, shape %v needs %d", len(t.Data), t.Shape, n)
	}
	if h.Fortran && len(t.Shape) > 1 {
		t.Data = FromFortran(t.Data, t.Shape)
	}
	return t, nil
}

func decodeSafetensors(data []byte) (ts map[string]Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			ts, err = nil, formatErr("not a valid .safetensors file (%v)", r)
		}
	}()
	// The library checks the header against the file size, the offsets
	// against each other and the shapes against the offsets.
	st, err := safetensors.Deserialize(data)
	if err != nil {
		return nil, formatErr("not a valid .safetensors file: %v", err)
	}
	ts = make(map[string]Tensor, st.Len())
	for _, nv := range st.Tensors() {
		tv := nv.TensorView
		t := Tensor{Shape: make([]int, len(tv.Shape())), DType: tv.DType().String()}
		for i, s := range tv.Shape() {
			if s > maxElements {
				return nil, formatErr("tensor %q: shape %v is too large", nv.Name, tv.Shape())
			}
			t.Shape[i] = int(s)
		}
		n, err := elements(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", nv.Name, err)
		}
		raw := tv.Data()
		size := 0
		switch tv.DType() {
		case safetensors.F32, safetensors.F64, safetensors.F16, safetensors.BF16, safetensors.BOOL:
			size = int(tv.DType().Size())
		}
		if size == 0 {
			ts[nv.Name] = t // kept, without data, as for .npz.
			continue
		}
		if len(raw) != n*size {
			return nil, formatErr("tensor %q: shape %v of %s needs %d bytes, has %d", nv.Name, t.Shape, t.DType, n*size, len(raw))
		}
		t.Data = make([]float32, n)
		for i := range t.Data {
			switch tv.DType() {
			case safetensors.F32:
				t.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			case safetensors.F64:
				v := math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
				t.Data[i] = float32(v)
				if math.IsInf(float64(t.Data[i]), 0) && !math.IsInf(v, 0) {
					return nil, formatErr("tensor %q: float64 value %d (%g) is outside the float32 range", nv.Name, i, v)
				}
			case safetensors.F16:
				t.Data[i] = float16.Float16Frombits(binary.LittleEndian.Uint16(raw[2*i:])).Float32()
			case safetensors.BF16:
				t.Data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
			case safetensors.BOOL:
				if raw[i] != 0 {
					t.Data[i] = 1
				}
			}
		}
		ts[nv.Name] = t
	}
	return ts, nil
}

// elements is the product of shape, refusing negative extents and more than
// maxElements elements.
func elements(shape []int) (int, error) {
	n := 1
	for _, s := range shape {
		if s < 0 {
			return 0, formatErr("negative extent in shape %v", shape)
		}
		if s > 0 && n > maxElements/s {
			return 0, formatErr("shape %v is too large", shape)
		}
		n *= s
	}
	return n, nil
}

// Narrow converts float64 to float32, refusing finite values float32
// cannot hold (they would silently become infinities).
func Narrow(x []float64) ([]float32, error) {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
		if math.IsInf(float64(out[i]), 0) && !math.IsInf(v, 0) {
			return nil, fmt.Errorf("float64 value %d (%g) is outside the float32 range", i, v)
		}
	}
	return out, nil
}

// FromFortran reorders column-major (NumPy fortran_order) data of the given
// shape to row-major.
func FromFortran[T any](x []T, shape []int) []T {
	if len(x) == 0 {
		return x
	}
	out := make([]T, len(x))
	idx := make([]int, len(shape))
	for i := range out {
		// i is the row-major index; find its column-major offset.
		off, stride := 0, 1
		for a := range shape {
			off += idx[a] * stride
			stride *= shape[a]
		}
		out[i] = x[off]
		for a := len(shape) - 1; a >= 0; a-- {
			idx[a]++
			if idx[a] < shape[a] {
				break
			}
			idx[a] = 0
		}
	}
	return out
}

// names lists the tensors of ts for error messages, sorted, at most 20.
func names(ts map[string]Tensor) string {
	ns := make([]string, 0, len(ts))
	for n := range ts {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	if len(ns) > 20 {
		ns = append(ns[:20], fmt.Sprintf("... (%d more)", len(ns)-20))
	}
	if len(ns) == 0 {
		return "none"
	}
	return strings.Join(ns, ", ")
}
