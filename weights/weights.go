// Package weights reads named weight tensors from .npz (NumPy) and
// .safetensors files, and assembles from them the parameters of PyTorch's
// nn.MultiheadAttention and of additive (Bahdanau) attention. ReadNPY,
// the same .npy reader .npz members go through, reads single arrays.
//
// Open reads a file's index only; the layer builders of a File read just
// the tensors a layer uses, each checked against the shape wanted before
// its data is read, and decode the data straight into the result, so a
// tensor costs about its float32 size in memory. One File reads at most
// MaxTotalBytes.
//
// Values come back as float32: float64 is rounded (a finite value float32
// cannot hold is an error), float16 and bfloat16 widened, bool read as 0
// and 1. Any malformed or truncated part of a file that is read is an
// error wrapping ErrFormat, never a panic; a tensor that is never read is
// never checked.
package weights

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
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

// Load reads every tensor of a .npz or .safetensors file (see Open),
// within MaxTotalBytes. A caller that needs only some tensors reads fewer
// bytes with Open and File.Read, File.MHA or File.Additive.
func Load(path string) (map[string]Tensor, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadAll()
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

// decode reads every tensor of a .npz or .safetensors file held in memory.
func decode(data []byte) (map[string]Tensor, error) {
	f, err := newFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	return f.ReadAll()
}

// formatErr wraps ErrFormat with a description.
func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
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

// names lists sorted tensor names for error messages, at most 20.
func names(sorted []string) string {
	ns := sorted
	if len(ns) > 20 {
		ns = append(slices.Clone(ns[:20]), fmt.Sprintf("... (%d more)", len(ns)-20))
	}
	if len(ns) == 0 {
		return "none"
	}
	return strings.Join(ns, ", ")
}
