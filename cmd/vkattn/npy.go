package main

import (
	"bufio"

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
