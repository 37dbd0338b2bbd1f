package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"codeberg.org/sbinet/npyio"

	"github.com/vkattn/vkattn/weights"
)

// npyArray is the content of a .npy file: float data (float32, or float64
// converted) or bool data, row-major.
type npyArray struct {
	Path  string
	Shape []int
	DType string // as the header says, e.g. "<f4"
	F32   []float32
	Bools []bool
}

// maxNPYElements bounds what readNPY accepts, so a header claiming a huge
// shape fails cleanly instead of allocating. The device could not take more
// than 2^31 elements in one buffer anyway.
const maxNPYElements = math.MaxInt32

// readNPY reads a .npy file holding float32, float64 (converted to float32)
// or bool values. npyio parses the header and the data; the preamble and
// the data size are checked here first, because npyio trusts them (a
// truncated header or a huge claimed shape would panic or exhaust memory).
func readNPY(path string) (arr *npyArray, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) (*npyArray, error) {
		return nil, fmt.Errorf("%s: not a valid .npy file: %s", path, fmt.Sprintf(format, args...))
	}
	if len(data) < 10 || string(data[:6]) != "\x93NUMPY" {
		return fail("missing the \\x93NUMPY magic")
	}
	var hdrEnd int
	switch data[6] {
	case 1:
		hdrEnd = 10 + int(binary.LittleEndian.Uint16(data[8:10]))
	case 2:
		if len(data) < 12 {
			return fail("truncated header")
		}
		hdrEnd = 12 + int(binary.LittleEndian.Uint32(data[8:12]))
	default:
		return fail("format version %d.%d is not supported (1.0 or 2.0)", data[6], data[7])
	}
	if hdrEnd > len(data) || hdrEnd < 0 {
		return fail("header is truncated")
	}
	if bytes.IndexByte(data[:hdrEnd], '\n') < 0 {
		return fail("header does not end with a newline")
	}

	// npyio indexes into the header without bounds checks; a malformed
	// dictionary must become an error, not a crash.
	defer func() {
		if r := recover(); r != nil {
			arr, err = fail("malformed header (%v)", r)
		}
	}()
	r, err := npyio.NewReader(bytes.NewReader(data))
	if err != nil {
		return fail("%v", err)
	}
	h := r.Header.Descr
	arr = &npyArray{Path: path, Shape: h.Shape, DType: strings.Trim(h.Type, `'" `)}
	n := 1
	for _, s := range h.Shape {
		if s < 0 {
			return fail("negative extent in shape %v", h.Shape)
		}
		if s > 0 && n > maxNPYElements/s {
			return fail("shape %v is too large", h.Shape)
		}
		n *= s
	}
	var size int
	switch arr.DType {
	case "<f4", ">f4", "=f4":
		size = 4
	case "<f8", ">f8", "=f8":
		size = 8
	case "|b1", "b1", "?":
		size = 1
	default:
		return nil, fmt.Errorf("%s: dtype %s is not supported: want float32, float64 or bool", path, arr.DType)
	}
	if got := int64(len(data) - hdrEnd); got != int64(n)*int64(size) {
		return fail("shape %v of %s needs %d data bytes, the file has %d", h.Shape, arr.DType, int64(n)*int64(size), got)
	}
	switch size {
	case 4:
		err = r.Read(&arr.F32)
	case 8:
		var f64 []float64
		if err = r.Read(&f64); err == nil {
			arr.F32, err = weights.Narrow(f64)
		}
	case 1:
		err = r.Read(&arr.Bools)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	// npyio returns an empty slice for zero elements; keep lengths honest.
	if arr.F32 == nil && size != 1 {
		arr.F32 = []float32{}
	}
	if h.Fortran && len(h.Shape) > 1 {
		arr.F32 = weights.FromFortran(arr.F32, h.Shape)
		arr.Bools = weights.FromFortran(arr.Bools, h.Shape)
	}
	return arr, nil
}

// encodeNPY writes a little-endian float32 .npy (format 1.0). The header is
// written here rather than by npyio, whose writer only knows a shape from
// nested Go slices and walks them element by element (seconds for a few
// million values); readNPY, which uses npyio, reads the result back in tests.
func encodeNPY(w *bufio.Writer, shape []int, data []float32) error {
	dims := make([]string, len(shape))
	for i, s := range shape {
		dims[i] = fmt.Sprint(s)
	}
	tuple := "(" + strings.Join(dims, ", ") + ")"
	if len(shape) == 1 {
		tuple = "(" + dims[0] + ",)"
	}
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", tuple)
	// Pad so the data starts on a 64-byte boundary, as NumPy does.
	hdrLen := len(dict) + 1
	if pad := (10 + hdrLen) % 64; pad != 0 {
		hdrLen += 64 - pad
	}
	if hdrLen > math.MaxUint16 {
		return errors.New("npy header too long")
	}
	w.WriteString("\x93NUMPY\x01\x00")
	binary.Write(w, binary.LittleEndian, uint16(hdrLen))
	w.WriteString(dict)
	w.WriteString(strings.Repeat(" ", hdrLen-len(dict)-1))
	w.WriteByte('\n')
	var b [4]byte
	for _, x := range data {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
		w.Write(b[:])
	}
	return w.Flush()
}

// pendingFile is an output written to a temporary file beside its final
// path; commit renames it into place, so no reader ever sees half a file.
type pendingFile struct {
	tmp, path string
}

// stageNPY writes data to a temporary file in path's directory.
func stageNPY(path string, shape []int, data []float32) (*pendingFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, err
	}
	p := &pendingFile{tmp: f.Name(), path: path}
	// CreateTemp makes the file 0600; give the output the mode of the file
	// it replaces, or the usual 0644.
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
		mode = st.Mode().Perm()
	}
	err = f.Chmod(mode)
	if err == nil {
		err = encodeNPY(bufio.NewWriter(f), shape, data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p.tmp)
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return p, nil
}

func (p *pendingFile) commit() error {
	if err := os.Rename(p.tmp, p.path); err != nil {
		os.Remove(p.tmp)
		return err
	}
	return nil
}

func (p *pendingFile) discard() { os.Remove(p.tmp) }

// writeNPYFiles writes every output or none: all are staged first, then
// renamed into place.
func writeNPYFiles(outs []output) error {
	var staged []*pendingFile
	discard := func() {
		for _, p := range staged {
			p.discard()
		}
	}
	for _, o := range outs {
		p, err := stageNPY(o.path, o.shape, o.data)
		if err != nil {
			discard()
			return err
		}
		staged = append(staged, p)
	}
	for i, p := range staged {
		if err := p.commit(); err != nil {
			for _, q := range staged[i+1:] {
				q.discard()
			}
			return err
		}
	}
	return nil
}

// output is one array the run command writes.
type output struct {
	name  string // O, LSE, weights
	path  string
	shape []int
	data  []float32
}
