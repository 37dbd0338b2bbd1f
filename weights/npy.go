package weights

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/x448/float16"

	"github.com/vkattn/vkattn/internal/filekind"
)

// maxDataBytes bounds the data one .npy array may promise: 4 GiB, the most
// a Vulkan storage buffer can address (maxStorageBufferRange is 32-bit). A
// regular file must also hold what it promises; this bound is what stops
// an endless stream (a pipe, a device) from filling memory.
const maxDataBytes int64 = 4 << 30

// maxHeaderBytes bounds the header dictionary (NumPy's own reader refuses
// more than 10000 bytes by default).
const maxHeaderBytes = 1 << 20

// Array is the content of one .npy file, row-major: Fortran-ordered data
// is reordered.
type Array struct {
	// Shape as stored; empty for a scalar.
	Shape []int
	// Descr is the header's dtype, e.g. "<f4".
	Descr string
	// F32 holds float data (float32; float64 narrowed; float16 widened),
	// nil for any other dtype.
	F32 []float32
	// F16 holds float16 data as stored (bit patterns, row-major), beside
	// its widening in F32; nil for any other dtype.
	F16 []uint16
	// Bools holds bool data, nil for any other dtype.
	Bools []bool
}

// kindError is an error that matches kind (ErrFormat, ErrUnsupported)
// without showing its text, so that callers can put the file name first.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

// npyErr is what is wrong with a .npy file or member; callers add which.
func npyErr(format string, args ...any) error {
	return &kindError{fmt.Sprintf(format, args...), ErrFormat}
}

// ReadNPY reads a .npy file of float32, float64 (narrowed to float32, a
// finite value out of float32's range is an error), float16 or bool values.
// It reads the header, then exactly the data the header promises: never
// more than a regular file holds or maxDataBytes from a pipe or device.
func ReadNPY(path string) (*Array, error) {
	f, st, err := openStat(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, prealloc := int64(-1), false
	switch {
	case st.Mode().IsRegular():
		size, prealloc = st.Size(), true
	case st.IsDir():
		return nil, fmt.Errorf("%s is %s, not a .npy file", path, filekind.Describe(st.Mode()))
	}
	a, err := decodeNPY(f, size, prealloc)
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid .npy file: %w", path, err)
	}
	if a.F32 == nil && a.Bools == nil {
		return nil, fmt.Errorf("%s: %w", path, &kindError{fmt.Sprintf("dtype %s is not supported: want float32, float64, float16 or bool", a.Descr), ErrUnsupported})
	}
	return a, nil
}

// WriteNPY writes data of the given shape as a little-endian float32 .npy
// file (format 1.0), its header padded so that the data starts on a 64-byte
// boundary as NumPy writes it. The header is written here rather than by
// npyio, whose writer only knows a shape from nested Go slices and walks
// them element by element (seconds for a few million values).
func WriteNPY(w io.Writer, shape []int, data []float32) error {
	dict := npyDict("<f4", false, shape...)
	hdrLen := len(dict) + 1 // with the closing newline
	if pad := (10 + hdrLen) % 64; pad != 0 {
		hdrLen += 64 - pad
	}
	if hdrLen > math.MaxUint16 {
		return errors.New("npy header too long")
	}
	b := append([]byte("\x93NUMPY\x01\x00"), byte(hdrLen), byte(hdrLen>>8))
	b = append(b, dict...)
	b = append(b, strings.Repeat(" ", hdrLen-len(dict)-1)+"\n"...)
	if _, err := w.Write(b); err != nil {
		return err
	}
	b = b[:0]
	for i, x := range data {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		if len(b) >= 1<<16 || i == len(data)-1 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	return nil
}

// npyDict is the header dictionary of a .npy file of the given dtype,
// order and shape, as NumPy writes it.
func npyDict(descr string, fortran bool, shape ...int) string {
	dims := make([]string, len(shape))
	for i, s := range shape {
		dims[i] = strconv.Itoa(s)
	}
	tuple := "(" + strings.Join(dims, ", ") + ")"
	if len(shape) == 1 {
		tuple = "(" + dims[0] + ",)"
	}
	order := "False"
	if fortran {
		order = "True"
	}
	return fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, order, tuple)
}

// npyType is how a supported dtype is stored.
type npyType struct {
	dtype string // Tensor.DType
	size  int    // bytes per value
	order binary.ByteOrder
}

// parseDescr maps a header dtype to its storage; ok is false for a dtype
// this package does not read ('=' is taken as little-endian, the order of
// every machine vkattn runs on).
func parseDescr(descr string) (t npyType, ok bool) {
	switch descr {
	case "|b1", "b1", "?", "|?":
		return npyType{"BOOL", 1, binary.LittleEndian}, true
	}
	if len(descr) != 3 {
		return t, false
	}
	switch descr[0] {
	case '<', '=':
		t.order = binary.LittleEndian
	case '>':
		t.order = binary.BigEndian
	default:
		return t, false
	}
	switch descr[1:] {
	case "f2":
		t.dtype, t.size = "F16", 2
	case "f4":
		t.dtype, t.size = "F32", 4
	case "f8":
		t.dtype, t.size = "F64", 8
	default:
		return t, false
	}
	return t, true
}

// npyMeta is what a .npy preamble and header say about the data after them.
type npyMeta struct {
	npyHeader
	typ npyType
	// known: typ is a dtype this package reads; only then are elems and
	// dataBytes set (and checked against the size).
	known       bool
	elems       int
	headerBytes int64 // the preamble and header
	dataBytes   int64
}

// readNPYHeader reads the preamble and header of a .npy array from r and
// checks them against size, what r holds if known (a file's size, a zip
// member's declared size), else -1. For a dtype this package reads, the
// data the header promises must be within maxDataBytes and, with a known
// size, exactly what follows the header. No data is read.
func readNPYHeader(r io.Reader, size int64) (npyMeta, error) {
	var m npyMeta
	var pre [12]byte
	n, err := io.ReadFull(r, pre[:8])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return m, err
	}
	const magic = "\x93NUMPY"
	switch {
	case n == 0:
		return m, npyErr("empty, not even the \\x93NUMPY magic")
	case string(pre[:min(n, 6)]) != magic[:min(n, 6)]:
		return m, npyErr("missing the \\x93NUMPY magic")
	case n < 8:
		return m, npyErr("truncated after %d bytes, within the preamble", n)
	}
	pl := 10 // preamble length
	switch pre[6] {
	case 1:
	case 2:
		pl = 12
	default:
		return m, npyErr("format version %d.%d is not supported (1.0 or 2.0)", pre[6], pre[7])
	}
	if _, err := io.ReadFull(r, pre[8:pl]); err != nil {
		return m, readErr(err, "the header length")
	}
	var hdrLen int64
	if pl == 10 {
		hdrLen = int64(binary.LittleEndian.Uint16(pre[8:10]))
	} else {
		hdrLen = int64(binary.LittleEndian.Uint32(pre[8:12]))
	}
	if hdrLen > maxHeaderBytes {
		return m, npyErr("header length %d is more than the %d bytes allowed", hdrLen, maxHeaderBytes)
	}
	if size >= 0 && int64(pl)+hdrLen > size {
		return m, npyErr("header length %d runs past the end (%d bytes in all)", hdrLen, size)
	}
	hdr := make([]byte, hdrLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return m, readErr(err, "the header")
	}
	if m.npyHeader, err = parseHeader(string(hdr)); err != nil {
		return m, err
	}
	m.headerBytes = int64(pl) + hdrLen
	if m.typ, m.known = parseDescr(m.descr); !m.known {
		return m, nil
	}
	if m.elems, err = elements(m.shape); err != nil {
		return m, npyErr("shape %v has more than %d elements", m.shape, maxElements)
	}
	m.dataBytes = int64(m.elems) * int64(m.typ.size)
	switch {
	case m.dataBytes > maxDataBytes:
		return m, npyErr("shape %v of %s promises %d data bytes, more than the %d GiB allowed", m.shape, m.descr, m.dataBytes, maxDataBytes>>30)
	case size >= 0 && m.headerBytes+m.dataBytes != size:
		return m, npyErr("shape %v of %s needs %d data bytes, there are %d", m.shape, m.descr, m.dataBytes, size-m.headerBytes)
	}
	return m, nil
}

// decodeNPY reads one .npy array from r: the preamble and header
// (readNPYHeader), then, for a dtype it reads, exactly the data the header
// promises, then checks that r ends there. Only with prealloc (size is a
// regular file's) is the data allocated in one go; otherwise memory grows
// with the data actually read, so a size that lies costs nothing. For a
// dtype it does not read, only the header is read.
func decodeNPY(r io.Reader, size int64, prealloc bool) (*Array, error) {
	m, err := readNPYHeader(r, size)
	if err != nil {
		return nil, err
	}
	a := &Array{Shape: m.shape, Descr: m.descr}
	if !m.known {
		return a, nil
	}
	if err := readValues(r, a, m.typ, m.elems, prealloc); err != nil {
		return nil, err
	}
	if err := expectEnd(r, m); err != nil {
		return nil, err
	}
	if m.fortran && len(m.shape) > 1 {
		a.F32 = FromFortran(a.F32, m.shape)
		a.Bools = FromFortran(a.Bools, m.shape)
	}
	if m.typ.dtype == "F16" {
		// The stored bits, for a float16 tensor on the device: each value
		// was widened exactly, so narrowing it again gives its bits back.
		a.F16 = make([]uint16, len(a.F32))
		for i, x := range a.F32 {
			a.F16[i] = float16.Fromfloat32(x).Bits()
		}
	}
	return a, nil
}

// expectEnd checks that r ends after the data m promises. The zip reader
// checks a member's CRC only at its end, so this reads to it even when the
// size is known.
func expectEnd(r io.Reader, m npyMeta) error {
	var one [1]byte
	switch _, err := io.ReadFull(r, one[:]); {
	case err == nil:
		return npyErr("data continues past the %d bytes shape %v of %s needs", m.dataBytes, m.shape, m.descr)
	case !errors.Is(err, io.EOF):
		return err
	}
	return nil
}

// readErr describes a failed read of what (part of the file); running out
// of bytes is a format error.
func readErr(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return npyErr("truncated within %s", what)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}

// valueChunk is how many bytes of data are read at a time: a multiple of
// every value size.
const valueChunk = 1 << 16

// readData reads one chunk of an array's data into b; shape and descr
// describe the array for the error when it is truncated.
func readData(r io.Reader, b []byte, shape []int, descr string, total int64) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return npyErr("data is truncated: shape %v of %s needs %d bytes", shape, descr, total)
		}
		return fmt.Errorf("reading the data: %w", err)
	}
	return nil
}

// readValues reads n values of typ from r into a.F32 or a.Bools, a chunk at
// a time.
func readValues(r io.Reader, a *Array, typ npyType, n int, prealloc bool) error {
	capacity := n
	if !prealloc {
		capacity = min(n, valueChunk)
	}
	if typ.dtype == "BOOL" {
		a.Bools = make([]bool, 0, capacity)
	} else {
		a.F32 = make([]float32, 0, capacity)
	}
	total := int64(n) * int64(typ.size)
	buf := make([]byte, min(total, valueChunk))
	for done := 0; done < n; {
		b := buf[:min(len(buf), (n-done)*typ.size)]
		if err := readData(r, b, a.Shape, a.Descr, total); err != nil {
			return err
		}
		k := len(b) / typ.size
		if typ.dtype == "BOOL" {
			for _, c := range b {
				a.Bools = append(a.Bools, c != 0)
			}
		} else {
			a.F32 = slices.Grow(a.F32, k)
			if err := convert(a.F32[len(a.F32):len(a.F32)+k], b, typ, done); err != nil {
				return err
			}
			a.F32 = a.F32[:len(a.F32)+k]
		}
		done += k
	}
	return nil
}

// readInto reads len(dst) values of m's type from r straight into dst,
// row-major: a Fortran-ordered array's values are put in their row-major
// places as they arrive, so the data is held once, in dst.
func readInto(r io.Reader, dst []float32, m npyMeta) error {
	total := int64(len(dst)) * int64(m.typ.size)
	buf := make([]byte, min(total, valueChunk))
	var order *fortranOrder
	var scratch []float32
	if m.fortran && len(m.shape) > 1 {
		order = newFortranOrder(m.shape)
		scratch = make([]float32, len(buf)/m.typ.size)
	}
	for done := 0; done < len(dst); {
		b := buf[:min(len(buf), (len(dst)-done)*m.typ.size)]
		if err := readData(r, b, m.shape, m.descr, total); err != nil {
			return err
		}
		k := len(b) / m.typ.size
		if order == nil {
			if err := convert(dst[done:done+k], b, m.typ, done); err != nil {
				return err
			}
		} else {
			if err := convert(scratch[:k], b, m.typ, done); err != nil {
				return err
			}
			for _, x := range scratch[:k] {
				dst[order.next()] = x
			}
		}
		done += k
	}
	return nil
}

// convert decodes the len(dst) values stored as typ at the start of b into
// dst: bool as 0 and 1, float64 narrowed (a finite value out of float32's
// range is an error), half types widened. first is the index of b's first
// value in the array, for errors.
func convert(dst []float32, b []byte, typ npyType, first int) error {
	switch typ.dtype {
	case "BOOL":
		for i := range dst {
			dst[i] = 0
			if b[i] != 0 {
				dst[i] = 1
			}
		}
	case "F16":
		for i := range dst {
			dst[i] = float16.Frombits(typ.order.Uint16(b[2*i:])).Float32()
		}
	case "BF16":
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(typ.order.Uint16(b[2*i:])) << 16)
		}
	case "F32":
		for i := range dst {
			dst[i] = math.Float32frombits(typ.order.Uint32(b[4*i:]))
		}
	case "F64":
		for i := range dst {
			x, err := narrow(math.Float64frombits(typ.order.Uint64(b[8*i:])))
			if err != nil {
				return npyErr("value %d: %v", first+i, err)
			}
			dst[i] = x
		}
	default:
		return fmt.Errorf("weights: no conversion from %s", typ.dtype)
	}
	return nil
}

// fortranOrder walks a column-major array in storage order (the first axis
// fastest), giving each value's row-major offset.
type fortranOrder struct {
	shape, stride, idx []int
	off                int
}

func newFortranOrder(shape []int) *fortranOrder {
	o := &fortranOrder{shape: shape, stride: make([]int, len(shape)), idx: make([]int, len(shape))}
	s := 1
	for a := len(shape) - 1; a >= 0; a-- {
		o.stride[a] = s
		s *= shape[a]
	}
	return o
}

// next is the row-major offset of the next value in storage order.
func (o *fortranOrder) next() int {
	off := o.off
	for a := range o.shape {
		o.idx[a]++
		o.off += o.stride[a]
		if o.idx[a] < o.shape[a] {
			break
		}
		o.off -= o.idx[a] * o.stride[a]
		o.idx[a] = 0
	}
	return off
}

// npyHeader is the header dictionary of a .npy file.
type npyHeader struct {
	descr   string
	fortran bool
	shape   []int
}

// parseHeader parses the header: a Python dict literal with exactly the
// keys descr (a dtype string), fortran_order (True or False) and shape (a
// tuple of integers), padded with spaces and ending in a newline. Any
// other content (a structured dtype, an extra key) is described as an
// error.
func parseHeader(s string) (npyHeader, error) {
	var h npyHeader
	if !strings.HasSuffix(s, "\n") {
		return h, npyErr("header does not end with a newline")
	}
	p := &dictParser{s: s}
	p.space()
	if !p.eat('{') {
		return h, npyErr("header is not a dict: it starts with %q", p.rest(10))
	}
	seen := map[string]bool{}
	for {
		p.space()
		if p.eat('}') {
			break
		}
		if p.done() {
			return h, npyErr("header dict is not terminated")
		}
		key, err := p.str("a key")
		if err != nil {
			return h, err
		}
		if seen[key] {
			return h, npyErr("key %q appears twice in the header dict", key)
		}
		seen[key] = true
		p.space()
		if !p.eat(':') {
			return h, npyErr("header dict: no ':' after key %q", key)
		}
		p.space()
		switch key {
		case "descr":
			if p.peek() == '[' {
				return h, npyErr("descr is a list: structured dtypes are not supported")
			}
			h.descr, err = p.str("the descr value")
		case "fortran_order":
			switch {
			case strings.HasPrefix(p.s[p.i:], "True"):
				h.fortran, p.i = true, p.i+4
			case strings.HasPrefix(p.s[p.i:], "False"):
				p.i += 5
			default:
				err = npyErr("fortran_order is %q, want True or False", p.rest(10))
			}
		case "shape":
			h.shape, err = p.tuple()
		default:
			err = npyErr("unknown key %q in the header dict (want descr, fortran_order and shape)", key)
		}
		if err != nil {
			return h, err
		}
		p.space()
		if !p.eat(',') && p.peek() != '}' {
			if p.done() {
				return h, npyErr("header dict is not terminated")
			}
			return h, npyErr("header dict: %q after the %s value, want ',' or '}'", p.rest(10), key)
		}
	}
	if p.space(); !p.done() {
		return h, npyErr("header has %q after the dict", p.rest(10))
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, npyErr("%s field missing from the header dict", k)
		}
	}
	return h, nil
}

// dictParser walks the header text; i is the next byte.
type dictParser struct {
	s string
	i int
}

func (p *dictParser) done() bool { return p.i >= len(p.s) }

func (p *dictParser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

func (p *dictParser) eat(c byte) bool {
	if p.peek() == c && !p.done() {
		p.i++
		return true
	}
	return false
}

func (p *dictParser) space() {
	for !p.done() && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

// rest is up to n bytes from the current position, for messages.
func (p *dictParser) rest(n int) string {
	return p.s[p.i:min(len(p.s), p.i+n)]
}

// str parses a quoted string without escapes (a dtype or key needs none).
func (p *dictParser) str(what string) (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		if p.done() {
			return "", npyErr("header dict is not terminated")
		}
		return "", npyErr("header dict: %s is not a quoted string: %q", what, p.rest(10))
	}
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", npyErr("header dict: %s has no closing quote", what)
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.ContainsAny(v, "\\\n") {
		return "", npyErr("header dict: %s %q has an escape or a newline", what, v)
	}
	p.i += end + 2
	return v, nil
}

// tuple parses the shape: "()", "(n,)" or "(n, m, ...)" with an optional
// trailing comma; Python 2 wrote long integers with an L suffix.
func (p *dictParser) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, npyErr("shape is not a tuple: %q", p.rest(10))
	}
	shape := []int{}
	comma := false // the last extent had a comma after it
	for {
		p.space()
		if p.eat(')') {
			if len(shape) == 1 && !comma {
				return nil, npyErr("shape (%d) is not a tuple: a one-element tuple needs a trailing comma", shape[0])
			}
			return shape, nil
		}
		start := p.i
		p.eat('-')
		for !p.done() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		digits := p.s[start:p.i]
		if digits == "" || digits == "-" {
			if p.done() {
				return nil, npyErr("shape tuple is not terminated")
			}
			return nil, npyErr("shape has %q where an integer should be", p.rest(10))
		}
		if d := strings.TrimPrefix(digits, "-"); len(d) > 1 && d[0] == '0' {
			return nil, npyErr("shape extent %s has a leading zero, which Python 3 does not allow", digits)
		}
		if p.peek() == 'L' || p.peek() == 'l' {
			p.i++
		}
		v, err := strconv.Atoi(digits)
		switch {
		case err != nil:
			return nil, npyErr("shape extent %s is too large", digits)
		case v < 0:
			return nil, npyErr("shape has a negative extent %d", v)
		}
		shape = append(shape, v)
		p.space()
		if comma = p.eat(','); !comma && p.peek() != ')' {
			if p.done() {
				return nil, npyErr("shape tuple is not terminated")
			}
			return nil, npyErr("shape has %q after an extent, want ',' or ')'", p.rest(10))
		}
	}
}
