package main

import (
	"archive/zip"
	"bufio"
	"fmt"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/verify"
	"github.com/vkattn/vkattn/weights"
)

// npyArray is the content of a .npy file: float data (float32; float64
// narrowed, float16 widened) or bool data, row-major.
type npyArray struct {
	Path  string
	Shape []int
	DType string // as the header says, e.g. "<f4"
	F32   []float32
	F16   []uint16 // a float16 file's bit patterns, nil for other dtypes
	Bools []bool
	// Store is the element type the array is uploaded as; F32 then holds
	// the values rounded to it (what the device and the reference read).
	Store vkattn.DType
}

// storeAs makes t the array's element type on the device: float32 values
// are rounded to it (an error names the value that does not fit); a
// float16 file stored as float16 keeps its bits as they are.
func (a *npyArray) storeAs(t vkattn.DType) error {
	if q, ok := t.Quant(); ok && a.Shape[len(a.Shape)-1]%q.Block != 0 {
		return fmt.Errorf("%v stores rows in blocks of %d values; these rows have %d: %w", t, q.Block, a.Shape[len(a.Shape)-1], vkattn.ErrShape)
	}
	a.Store = t
	if t == vkattn.Float16 && a.F16 != nil {
		return nil // F32 is their exact widening
	}
	a.F16 = nil
	if t == vkattn.Float32 {
		return nil
	}
	rounded, err := vkattn.Round(t, a.F32)
	if err != nil {
		return err
	}
	a.F32 = rounded
	return nil
}

// input is the array as verify uploads it: as its Store type (a float16
// file's bits unchanged); nil stays nil.
func (a *npyArray) input() *verify.Input {
	if a == nil {
		return nil
	}
	in := verify.Input{Shape: a.Shape, Data: a.F32, Type: a.Store}
	if a.Store == vkattn.Float16 {
		in.Bits = a.F16
	}
	return &in
}

// readNPY reads a .npy input with weights.ReadNPY, the reader .npz members
// go through too: it reads no more than the header promises, so an endless
// input such as /dev/zero fails on its header.
func readNPY(path string) (*npyArray, error) {
	a, err := weights.ReadNPY(path)
	if err != nil {
		return nil, err
	}
	return &npyArray{Path: path, Shape: a.Shape, DType: a.Descr, F32: a.F32, F16: a.F16, Bools: a.Bools}, nil
}

// encodeNPY writes a little-endian float32 .npy (weights.WriteNPY).
func encodeNPY(w *bufio.Writer, shape []int, data []float32) error {
	if err := weights.WriteNPY(w, shape, data); err != nil {
		return err
	}
	return w.Flush()
}

// stageNPY writes data to a temporary file beside path's target.
func stageNPY(path string, shape []int, data []float32) (*pendingFile, error) {
	return stageFile(path, func(w *bufio.Writer) error { return encodeNPY(w, shape, data) })
}

// writeNPYFiles writes every output, then the staged files more, or none:
// all are staged first, then committed together (commitAll).
func writeNPYFiles(outs []output, more ...*pendingFile) error {
	var staged []*pendingFile
	for _, o := range outs {
		p, err := stageNPY(o.path, o.shape, o.data)
		if err != nil {
			for _, p := range append(staged, more...) {
				p.discard()
			}
			return err
		}
		staged = append(staged, p)
	}
	return commitAll(append(staged, more...))
}

// output is one array the run command writes.
type output struct {
	name  string // O, LSE, weights
	path  string
	shape []int
	data  []float32
}

// stageArraysNPZ writes the arrays as the members "<name>.npy" of an .npz
// file (numpy.load reads it as a dict) to a temporary file (stageFile).
func stageArraysNPZ(path string, members []output) (*pendingFile, error) {
	return stageFile(path, func(w *bufio.Writer) error {
		zw := zip.NewWriter(w)
		for _, m := range members {
			f, err := zw.Create(m.name + ".npy")
			if err != nil {
				return err
			}
			if err := weights.WriteNPY(f, m.shape, m.data); err != nil {
				return err
			}
		}
		if err := zw.Close(); err != nil {
			return err
		}
		return w.Flush()
	})
}
