package weights

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// decodeBytes runs decodeNPY on data, as a file of known size or, with
// stream, as a pipe; a panic fails the test instead of ending the run.
func decodeBytes(t *testing.T, data []byte, stream bool) (a *Array, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("decodeNPY(%q) panicked: %v", data, r)
		}
	}()
	size := int64(len(data))
	if stream {
		size = -1
	}
	return decodeNPY(bytes.NewReader(data), size, !stream)
}

// npyV2 builds a format 2.0 .npy file (a 4-byte header length).
func npyV2(dict string, raw []byte) []byte {
	hdr := dict + "\n"
	b := append([]byte("\x93NUMPY\x02\x00"), binary.LittleEndian.AppendUint32(nil, uint32(len(hdr)))...)
	return append(append(b, hdr...), raw...)
}

func TestReadNPY(t *testing.T) {
	f16 := func(bits ...uint16) []byte {
		var b []byte
		for _, x := range bits {
			b = binary.LittleEndian.AppendUint16(b, x)
		}
		return b
	}
	cases := []struct {
		name string
		file []byte
		want Array
	}{
		{"f4", f32NPY([]int{2, 3}, seq(6)), Array{Shape: []int{2, 3}, Descr: "<f4", F32: seq(6)}},
		{"f8", npyBytes(npyDict("<f8", false, 2), f64Bytes(0.5, -1e-3)), Array{Shape: []int{2}, Descr: "<f8", F32: []float32{0.5, -1e-3}}},
		{"f2", npyBytes(npyDict("<f2", false, 3), f16(0x3c00, 0xc000, 0x0001)), Array{Shape: []int{3}, Descr: "<f2", F32: []float32{1, -2, 0x1p-24}, F16: []uint16{0x3c00, 0xc000, 0x0001}}},
		{"big-endian f2", npyBytes(npyDict(">f2", false, 1), []byte{0x3c, 0x00}), Array{Shape: []int{1}, Descr: ">f2", F32: []float32{1}, F16: []uint16{0x3c00}}},
		{"big-endian f4", npyBytes(npyDict(">f4", false, 1), []byte{0x3f, 0x80, 0, 0}), Array{Shape: []int{1}, Descr: ">f4", F32: []float32{1}}},
		{"bool", npyBytes(npyDict("|b1", false, 3), []byte{1, 0, 2}), Array{Shape: []int{3}, Descr: "|b1", Bools: []bool{true, false, true}}},
		{"fortran", npyBytes(npyDict("<f4", true, 2, 3), f32Bytes(1, 4, 2, 5, 3, 6)), Array{Shape: []int{2, 3}, Descr: "<f4", F32: []float32{1, 2, 3, 4, 5, 6}}},
		{"fortran bool", npyBytes(npyDict("|b1", true, 2, 2), []byte{1, 0, 1, 1}), Array{Shape: []int{2, 2}, Descr: "|b1", Bools: []bool{true, true, false, true}}},
		{"scalar", npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f32Bytes(7)), Array{Shape: []int{}, Descr: "<f4", F32: []float32{7}}},
		{"empty", npyBytes(npyDict("<f4", false, 0, 4), nil), Array{Shape: []int{0, 4}, Descr: "<f4", F32: []float32{}}},
		{"empty bool", npyBytes(npyDict("|b1", false, 0), nil), Array{Shape: []int{0}, Descr: "|b1", Bools: []bool{}}},
		{"version 2", npyV2(npyDict("<f4", false, 1), f32Bytes(3)), Array{Shape: []int{1}, Descr: "<f4", F32: []float32{3}}},
		// Any key order, either quote, Python 2 long integers and no
		// trailing comma are all valid literals NumPy reads.
		{"key order", npyBytes(`{"shape": (2L, 1L), "fortran_order": False, "descr": "<f4"}   `, f32Bytes(1, 2)), Array{Shape: []int{2, 1}, Descr: "<f4", F32: []float32{1, 2}}},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name+".npy")
			if err := os.WriteFile(p, c.file, 0o644); err != nil {
				t.Fatal(err)
			}
			a, err := ReadNPY(p)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*a, c.want) {
				t.Fatalf("got %+v, want %+v", *a, c.want)
			}
			// The same bytes from a pipe.
			if a, err := decodeBytes(t, c.file, true); err != nil || !reflect.DeepEqual(*a, c.want) {
				t.Fatalf("as a stream: %+v, %v", a, err)
			}
		})
	}

	p := filepath.Join(dir, "ints.npy")
	os.WriteFile(p, npyBytes(npyDict("<i8", false, 1), make([]byte, 8)), 0o644)
	if _, err := ReadNPY(p); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), p+": dtype <i8 is not supported") {
		t.Errorf("int64 file: %v", err)
	}
	if _, err := ReadNPY(dir); err == nil || !strings.Contains(err.Error(), dir+" is a directory") {
		t.Errorf("directory: %v", err)
	}
	if _, err := ReadNPY(filepath.Join(dir, "none.npy")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestReadNPYMalformed checks that every malformed file says what is wrong
// with it, naming the file, and never panics (issue 14a: a header dict
// without its closing brace showed "slice bounds out of range [:-3]").
func TestReadNPYMalformed(t *testing.T) {
	const ok = "'descr': '<f4', 'fortran_order': False"
	cases := []struct {
		name, msg string
		file      []byte
	}{
		{"unterminated dict", "header dict is not terminated", npyBytes("{"+ok+", 'shape': (2,), ", f32Bytes(1, 2))},
		{"unterminated after key", "header dict is not terminated", npyBytes("{'descr': '<f4'", nil)},
		{"no shape", "shape field missing from the header dict", npyBytes("{"+ok+", }", nil)},
		{"no descr", "descr field missing", npyBytes("{'fortran_order': False, 'shape': (1,), }", f32Bytes(1))},
		{"no order", "fortran_order field missing", npyBytes("{'descr': '<f4', 'shape': (1,), }", f32Bytes(1))},
		{"structured", "descr is a list: structured dtypes are not supported", npyBytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", f32Bytes(1))},
		{"order value", `fortran_order is "Maybe, 'sh", want True or False`, npyBytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", f32Bytes(1))},
		{"shape text", `shape has "a, 2), }\n" where an integer should be`, npyBytes("{"+ok+", 'shape': (a, 2), }", nil)},
		{"shape not tuple", "shape is not a tuple", npyBytes("{"+ok+", 'shape': [2], }", nil)},
		{"one-tuple", "shape (2) is not a tuple: a one-element tuple needs a trailing comma", npyBytes("{"+ok+", 'shape': (2), }", f32Bytes(1, 2))},
		{"unterminated shape", "shape tuple is not terminated", npyBytes("{"+ok+", 'shape': (2", nil)},
		{"shape separator", `shape has "; 3), }\n" after an extent`, npyBytes("{"+ok+", 'shape': (2; 3), }", nil)},
		{"negative", "shape has a negative extent -2", npyBytes(npyDict("<f4", false, -2, 3), nil)},
		{"leading zero", "shape extent 02 has a leading zero", npyBytes("{"+ok+", 'shape': (2, 02), }", nil)},
		{"huge extent", "shape extent 99999999999999999999 is too large", npyBytes("{"+ok+", 'shape': (99999999999999999999,), }", nil)},
		{"too many elements", "shape [1048576 1048576] has more than 2147483647 elements", npyBytes(npyDict("<f4", false, 1<<20, 1<<20), nil)},
		{"extra key", `unknown key "extra"`, npyBytes("{"+ok+", 'shape': (1,), 'extra': 1}", f32Bytes(1))},
		{"duplicate key", `key "descr" appears twice`, npyBytes("{"+ok+", 'descr': '<f4', 'shape': (1,)}", f32Bytes(1))},
		{"no comma", `header dict: "'fortran_o" after the descr value, want ',' or '}'`, npyBytes("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", f32Bytes(1))},
		{"no colon", `header dict: no ':' after key "descr"`, npyBytes("{'descr' '<f4'}", nil)},
		{"bare key", "header dict: a key is not a quoted string", npyBytes("{descr: '<f4'}", nil)},
		{"open quote", "header dict: the descr value has no closing quote", npyBytes("{'descr': '<f4}", nil)},
		{"escape", `header dict: the descr value "<f\\4" has an escape`, npyBytes(`{'descr': '<f\4', 'fortran_order': False, 'shape': (1,)}`, nil)},
		{"not a dict", `header is not a dict: it starts with "nothing he"`, npyBytes("nothing here", nil)},
		{"after dict", `header has "x\n" after the dict`, npyBytes("{"+ok+", 'shape': (1,)} x", f32Bytes(1))},
		{"no newline", "header does not end with a newline", append([]byte("\x93NUMPY\x01\x00\x04\x00"), "{ab}"...)},
		{"empty", "empty, not even the \\x93NUMPY magic", nil},
		{"short", "truncated after 4 bytes, within the preamble", []byte("\x93NUM")},
		{"magic", "missing the \\x93NUMPY magic", append([]byte("\x93NUMPX\x01\x00\x10\x00"), make([]byte, 16)...)},
		{"version", "format version 7.0 is not supported", append([]byte("\x93NUMPY\x07\x00\x10\x00"), make([]byte, 16)...)},
		{"header length", "truncated within the header length", []byte("\x93NUMPY\x02\x00\x01")},
		{"header past end", "header length 255 runs past the end (18 bytes in all)", []byte("\x93NUMPY\x01\x00\xff\x00{'descr'")},
		{"huge header", "header length 4294967295 is more than the 1048576 bytes allowed", []byte("\x93NUMPY\x02\x00\xff\xff\xff\xff{")},
		{"short data", "shape [2 3] of <f4 needs 24 data bytes, there are 12", npyBytes(npyDict("<f4", false, 2, 3), f32Bytes(1, 2, 3))},
		{"long data", "shape [2] of <f4 needs 8 data bytes, there are 12", npyBytes(npyDict("<f4", false, 2), f32Bytes(1, 2, 3))},
		{"f8 range", "value 1: float64 value 1.3611e+39 is outside the float32 range", npyBytes(npyDict("<f8", false, 2), f64Bytes(1, 1.3611e39))},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".npy")
			if err := os.WriteFile(p, c.file, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadNPY(p)
			want := p + ": not a valid .npy file: " + c.msg
			if !errors.Is(err, ErrFormat) || !strings.Contains(fmtErr(err), want) {
				t.Fatalf("err = %v\nwant ErrFormat containing %q", err, want)
			}
			if strings.Contains(err.Error(), "runtime error") {
				t.Fatalf("err = %v", err)
			}
		})
	}
	// From a pipe, the data's length is checked by reading.
	for name, c := range map[string]struct {
		msg  string
		file []byte
	}{
		"short data": {"data is truncated: shape [2 3] of <f4 needs 24 bytes", npyBytes(npyDict("<f4", false, 2, 3), f32Bytes(1, 2, 3))},
		"long data":  {"data continues past the 8 bytes shape [2] of <f4 needs", npyBytes(npyDict("<f4", false, 2), f32Bytes(1, 2, 3))},
	} {
		if _, err := decodeBytes(t, c.file, true); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("stream with %s: err = %v, want %q", name, err, c.msg)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// endless is a stream that yields prefix and then zeros forever, counting
// the bytes it gave.
type endless struct {
	prefix []byte
	read   int64
}

func (e *endless) Read(b []byte) (int, error) {
	n := copy(b, e.prefix)
	e.prefix = e.prefix[n:]
	clear(b[n:])
	e.read += int64(len(b))
	return len(b), nil
}

// An endless or huge input is read no further than its header promises
// (issue 10: -q /dev/zero exhausted memory).
func TestReadNPYEndlessInput(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := ReadNPY("/dev/zero"); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "/dev/zero: not a valid .npy file: missing the \\x93NUMPY magic") {
			t.Errorf("/dev/zero: %v", err)
		}
	}
	zeros := &endless{}
	if _, err := decodeNPY(zeros, -1, false); !errors.Is(err, ErrFormat) || zeros.read > 64 {
		t.Errorf("endless zeros: read %d bytes, err %v", zeros.read, err)
	}

	// A valid header, then more data than it promises.
	hdr := npyBytes(npyDict("<f4", false, 2), nil)
	s := &endless{prefix: hdr}
	_, err := decodeNPY(s, -1, false)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "data continues past the 8 bytes") || s.read > 1<<17 {
		t.Errorf("endless data: read %d bytes, err %v", s.read, err)
	}

	// A header promising more than maxDataBytes is refused before the data.
	hdr = npyBytes(npyDict("<f8", false, math.MaxInt32), nil)
	s = &endless{prefix: hdr}
	_, err = decodeNPY(s, -1, false)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "promises 17179869176 data bytes, more than the 4 GiB allowed") || s.read > 1<<17 {
		t.Errorf("huge promise: read %d bytes, err %v", s.read, err)
	}
}

// A regular file whose header promises more than the file holds fails
// without allocating what it promises.
func TestReadNPYPromiseExceedsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "liar.npy")
	os.WriteFile(p, npyBytes(npyDict("<f4", false, 1<<28), f32Bytes(1, 2)), 0o644)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadNPY(p)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "needs 1073741824 data bytes, there are 8") {
		t.Errorf("err = %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("allocated %d bytes for a 1 GiB promise", grew)
	}
}

// WriteNPY's files read back with their shape and values, the data on a
// 64-byte boundary as NumPy aligns it; the large one is written in pieces.
func TestWriteNPY(t *testing.T) {
	large := make([]float32, 40000)
	for i := range large {
		large[i] = float32(i) / 7
	}
	for _, c := range []struct {
		shape []int
		data  []float32
	}{
		{[]int{}, []float32{2.5}},
		{[]int{3}, []float32{1, -2, 3}},
		{[]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}},
		{[]int{4, 100, 100}, large},
	} {
		var b bytes.Buffer
		if err := WriteNPY(&b, c.shape, c.data); err != nil {
			t.Fatal(err)
		}
		if hdr := 10 + int(binary.LittleEndian.Uint16(b.Bytes()[8:])); hdr%64 != 0 || b.Len() != hdr+4*len(c.data) {
			t.Errorf("shape %v: data at byte %d of %d, want a multiple of 64 followed by %d bytes", c.shape, hdr, b.Len(), 4*len(c.data))
		}
		p := filepath.Join(t.TempDir(), "x.npy")
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := ReadNPY(p)
		if err != nil {
			t.Fatal(err)
		}
		if a.Descr != "<f4" || !reflect.DeepEqual(a.Shape, c.shape) || !reflect.DeepEqual(a.F32, c.data) {
			t.Errorf("shape %v: read back %s %v with %d values", c.shape, a.Descr, a.Shape, len(a.F32))
		}
	}
}
