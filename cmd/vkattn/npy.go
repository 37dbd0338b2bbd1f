package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/vkattn/vkattn/weights"
)

// npyArray is the content of a .npy file: float data (float32; float64
// narrowed, float16 widened) or bool data, row-major.
type npyArray struct {
	Path  string
	Shape []int
	DType string // as the header says, e.g. "<f4"
	F32   []float32
	Bools []bool
}

// readNPY reads a .npy input with weights.ReadNPY, the reader .npz members
// go through too: it reads no more than the header promises, so an endless
// input such as /dev/zero fails on its header.
func readNPY(path string) (*npyArray, error) {
	a, err := weights.ReadNPY(path)
	if err != nil {
		return nil, err
	}
	return &npyArray{Path: path, Shape: a.Shape, DType: a.Descr, F32: a.F32, Bools: a.Bools}, nil
}

// encodeNPY writes a little-endian float32 .npy (format 1.0). The header is
// written here rather than by npyio, whose writer only knows a shape from
// nested Go slices and walks them element by element (seconds for a few
// million values); tests read the result back with npyio.
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

// stageNPY writes data to a temporary file beside path's target.
func stageNPY(path string, shape []int, data []float32) (*pendingFile, error) {
	return stageFile(path, func(w *bufio.Writer) error { return encodeNPY(w, shape, data) })
}

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
