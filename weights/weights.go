// Package weights reads named weight tensors from .npz (NumPy) and
// .safetensors files, and assembles from them the parameters of PyTorch's
// nn.MultiheadAttention and of additive (Bahdanau) attention. ReadNPY,
// the same .npy reader .npz members go through, reads single arrays.
//
// Values come back as float32: float64 is rounded (a finite value float32
// cannot hold is an error), float16 and bfloat16 widened, bool read as 0
// and 1. Any malformed or truncated file is an error wrapping ErrFormat,
// never a panic.
package weights

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/nlpodyssey/safetensors"
	"github.com/x448/float16"

	"github.com/vkattn/vkattn/internal/filekind"
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
// names lose their ".npy" suffix, as numpy.load shows them. The file must
// be a regular file: a .npz is read in place, a member at a time.
func Load(path string) (map[string]Tensor, error) {
	f, st, err := openStat(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is %s; a weights file must be a regular file", ErrUnsupported, path, filekind.Describe(st.Mode()))
	}
	ts, err := decodeAt(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, nil
}

// openStat opens path and stats the file it opened (not the path, which
// may name another file by then).
func openStat(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// decode reads the content of a .npz or .safetensors file held in memory.
func decode(data []byte) (map[string]Tensor, error) {
	return decodeAt(bytes.NewReader(data), int64(len(data)))
}

// decodeAt reads a .npz (a zip archive) or .safetensors file of size bytes.
func decodeAt(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	var magic [4]byte
	n, _ := r.ReadAt(magic[:], 0)
	if m := string(magic[:n]); m == "PK\x03\x04" || m == "PK\x05\x06" {
		return decodeNPZ(r, size)
	}
	// The safetensors library parses a whole file in memory.
	data := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(r, 0, size), data); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	return decodeSafetensors(data)
}

// formatErr wraps ErrFormat with a description.
func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// decodeNPZ reads every member of a .npz archive as a .npy array.
func decodeNPZ(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, formatErr("not a valid .npz file: %v", err)
	}
	ts := make(map[string]Tensor, len(zr.File))
	for _, f := range zr.File {
		name := strings.TrimSuffix(f.Name, ".npy")
		if _, dup := ts[name]; dup {
			return nil, formatErr("array %q appears twice", name)
		}
		t, err := readMember(f)
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", name, err)
		}
		ts[name] = t
	}
	return ts, nil
}

// readMember decodes one .npz member. The zip directory's uncompressed
// size must be what the .npy header needs, so a member that would inflate
// to more (a zip bomb) fails after its header, not after inflating; the zip
// reader itself refuses to inflate past the declared size.
func readMember(f *zip.File) (Tensor, error) {
	if f.UncompressedSize64 > uint64(12+maxHeaderBytes+maxDataBytes) {
		return Tensor{}, formatErr("the zip directory says it inflates to %d bytes, more than a .npy array may hold", f.UncompressedSize64)
	}
	rc, err := f.Open()
	if err != nil {
		return Tensor{}, formatErr("%v", err)
	}
	defer rc.Close()
	a, err := decodeNPY(rc, int64(f.UncompressedSize64), false)
	switch {
	case errors.Is(err, ErrFormat):
		return Tensor{}, fmt.Errorf("not a valid .npy member: %w", err)
	case errors.Is(err, zip.ErrFormat):
		// What the zip reader says when a member inflates past its size.
		return Tensor{}, formatErr("inflates past the %d bytes its zip entry declares", f.UncompressedSize64)
	case err != nil:
		// A damaged deflate stream or a CRC mismatch.
		return Tensor{}, formatErr("%v", err)
	}
	t := Tensor{Shape: a.Shape, DType: a.Descr, Data: a.F32}
	if typ, ok := parseDescr(a.Descr); ok {
		t.DType = typ.dtype
	}
	if a.Bools != nil {
		t.Data = make([]float32, len(a.Bools))
		for i, b := range a.Bools {
			if b {
				t.Data[i] = 1
			}
		}
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
				if t.Data[i], err = narrow(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))); err != nil {
					return nil, formatErr("tensor %q: value %d: %v", nv.Name, i, err)
				}
			case safetensors.F16:
				t.Data[i] = float16.Frombits(binary.LittleEndian.Uint16(raw[2*i:])).Float32()
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
		var err error
		if out[i], err = narrow(v); err != nil {
			return nil, fmt.Errorf("value %d: %w", i, err)
		}
	}
	return out, nil
}

// narrow is one value of Narrow.
func narrow(v float64) (float32, error) {
	x := float32(v)
	if math.IsInf(float64(x), 0) && !math.IsInf(v, 0) {
		return 0, fmt.Errorf("float64 value %g is outside the float32 range", v)
	}
	return x, nil
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
