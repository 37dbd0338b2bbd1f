package weights

import (
	"archive/zip"
	"fmt"
	"io"
	"slices"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/filekind"
)

// MaxTotalBytes bounds what one File reads: the headers and tensor data it
// inflates or reads, data that widens to float32 (float16, bfloat16, bool)
// counted at its float32 size, since that is what it costs in memory. It is
// twice the most one tensor may hold (4 GiB), room for the largest packed
// nn.MultiheadAttention layer (in_proj_weight of 4 GiB and out_proj.weight
// a third of that), and what stops a small archive of well-formed members
// from filling memory.
const MaxTotalBytes int64 = 2 * maxDataBytes

// maxSafetensorsHeader bounds a .safetensors JSON header, as the format's
// reference reader does.
const maxSafetensorsHeader = 100_000_000

// File is a .npz or .safetensors file open for reading one tensor at a
// time: Open reads only its index (the zip directory, or the safetensors
// header), Info a tensor's header, Read a tensor's data, each tensor's
// header checked before any of its data is read. A File is not safe for
// concurrent use.
type File struct {
	path    string // in errors; "" for data in memory
	r       io.ReaderAt
	size    int64
	closer  io.Closer
	names   []string // sorted
	entries map[string]*entry
	// limit is MaxTotalBytes; used, what has been counted against it.
	limit, used int64
}

// entry is one tensor of a File: a .npz member, or a safetensors tensor
// whose data is the n bytes at off.
type entry struct {
	zf     *zip.File
	off, n int64
	// meta is the parsed header: from the safetensors header at Open, from
	// the member's .npy header once it has been read.
	meta *npyMeta
}

// Info is what a tensor's header says, read without its data.
type Info struct {
	// Shape as stored; empty for a scalar.
	Shape []int
	// DType as in Tensor.
	DType string
}

// Open opens a .npz or .safetensors file, told apart by content (a zip
// archive is .npz), not by name, and reads its index. .npz member names
// lose their ".npy" suffix, as numpy.load shows them. The file must be a
// regular file. Close it when done.
func Open(path string) (*File, error) {
	fh, st, err := openStat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("%w: %s is %s; a weights file must be a regular file", ErrUnsupported, path, filekind.Describe(st.Mode()))
	}
	f, err := newFile(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.path, f.closer = path, fh
	return f, nil
}

// newFile reads the index of a .npz or .safetensors file of size bytes.
func newFile(r io.ReaderAt, size int64) (*File, error) {
	f := &File{r: r, size: size, entries: map[string]*entry{}, limit: MaxTotalBytes}
	var magic [4]byte
	n, _ := r.ReadAt(magic[:], 0)
	var err error
	if m := string(magic[:n]); m == "PK\x03\x04" || m == "PK\x05\x06" {
		err = f.indexNPZ(size)
	} else {
		err = f.indexSafetensors(size)
	}
	if err != nil {
		return nil, err
	}
	for name := range f.entries {
		f.names = append(f.names, name)
	}
	slices.Sort(f.names)
	return f, nil
}

// Close closes the file.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	return f.closer.Close()
}

// Names lists the file's tensors, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Info reads the named tensor's header (for a .npz member, its .npy
// header; a .safetensors header was read by Open). A missing tensor is an
// error wrapping ErrMissing.
func (f *File) Info(name string) (Info, error) {
	m, err := f.meta(name)
	if err != nil {
		return Info{}, f.wrap(err)
	}
	return Info{Shape: slices.Clone(m.shape), DType: m.dtype()}, nil
}

// Read reads the named tensor, as Load would. A tensor of a type this
// package does not read comes back without data, and none of it is read.
func (f *File) Read(name string) (Tensor, error) {
	t, err := f.read(name)
	return t, f.wrap(err)
}

// ReadAll reads every tensor, as Load.
func (f *File) ReadAll() (map[string]Tensor, error) {
	ts := make(map[string]Tensor, len(f.names))
	for _, name := range f.names {
		t, err := f.read(name)
		if err != nil {
			return nil, f.wrap(err)
		}
		ts[name] = t
	}
	return ts, nil
}

// MHA reads the tensors of an nn.MultiheadAttention layer, and no others;
// see the function MHA for names, shapes and errors. Each tensor's shape
// and type are checked before its data is read.
func (f *File) MHA(prefix string, dModel, kdim, vdim int) (*core.MHAWeights, error) {
	w, err := mha(f, prefix, dModel, kdim, vdim)
	return w, f.wrap(err)
}

// Additive reads additive attention weights, and no other tensors; see
// the function Additive. Each tensor's shape and type are checked before
// its data is read.
func (f *File) Additive(prefix string, dQ, dK int) (*core.AdditiveWeights, error) {
	w, err := additive(f, prefix, dQ, dK)
	return w, f.wrap(err)
}

// wrap puts the file's path before err.
func (f *File) wrap(err error) error {
	if err == nil || f.path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", f.path, err)
}

// missing is the error for a tensor the file lacks.
func (f *File) missing(name string) error {
	return fmt.Errorf("%w: %s (tensors: %s)", ErrMissing, name, names(f.names))
}

// meta is the named tensor's parsed header, read once.
func (f *File) meta(name string) (*npyMeta, error) {
	e, ok := f.entries[name]
	if !ok {
		return nil, f.missing(name)
	}
	if e.meta == nil {
		// Only a .npz member's header is read lazily.
		rc, m, err := f.openMember(name, e)
		if err != nil {
			return nil, err
		}
		rc.Close()
		e.meta = &m
	}
	return e.meta, nil
}

// read reads the named tensor: its header, a check of its cost against the
// limit, then its data, straight into the result.
func (f *File) read(name string) (Tensor, error) {
	e, ok := f.entries[name]
	if !ok {
		return Tensor{}, f.missing(name)
	}
	if e.zf != nil {
		return f.readMember(name, e)
	}
	return f.readData(name, e.meta, func(data []float32) error {
		if err := readInto(io.NewSectionReader(f.r, e.off, e.n), data, *e.meta); err != nil {
			return fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		return nil
	})
}

// readData is the tensor m describes, its data (of a type vkattn reads)
// filled by fill once its cost is charged against the file's limit.
func (f *File) readData(name string, m *npyMeta, fill func(data []float32) error) (Tensor, error) {
	t := Tensor{Shape: slices.Clone(m.shape), DType: m.dtype()}
	if !m.known {
		return t, nil
	}
	if err := f.charge(name, m.cost()); err != nil {
		return Tensor{}, err
	}
	t.Data = make([]float32, m.elems)
	if err := fill(t.Data); err != nil {
		return Tensor{}, err
	}
	return t, nil
}

// charge counts n more bytes against the file's limit, refusing them (and
// counting nothing) past it.
func (f *File) charge(name string, n int64) error {
	if n > f.limit-f.used {
		return fmt.Errorf("%w: %s: reading it would take the bytes read from this file to %d, past the limit of %d (MaxTotalBytes)",
			ErrUnsupported, name, f.used+n, f.limit)
	}
	f.used += n
	return nil
}

// dtype is the Tensor.DType of the data m describes.
func (m *npyMeta) dtype() string {
	if m.known {
		return m.typ.dtype
	}
	return m.descr
}

// cost is what reading m's data counts against the limit: the bytes read
// or the float32 values they become, whichever is more.
func (m *npyMeta) cost() int64 {
	return max(m.dataBytes, 4*int64(m.elems))
}

// has, lookup, read and list make a File a source for the layer builders.

func (f *File) has(name string) bool {
	_, ok := f.entries[name]
	return ok
}

func (f *File) lookup(name string) (header, bool, error) {
	if !f.has(name) {
		return header{}, false, nil
	}
	m, err := f.meta(name)
	if err != nil {
		return header{}, true, err
	}
	return header{shape: m.shape, dtype: m.dtype(), float: m.known && m.typ.dtype != "BOOL"}, true, nil
}

func (f *File) list() string { return names(f.names) }
