package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// safetensorsSizes are the bytes per value of the safetensors dtypes; of
// these, only F32, F64, F16, BF16 and BOOL are read.
var safetensorsSizes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8,
}

// stErr is a malformed .safetensors file.
func stErr(format string, args ...any) error {
	return formatErr("not a valid .safetensors file: %s", fmt.Sprintf(format, args...))
}

// indexSafetensors reads a .safetensors header: an 8-byte little-endian
// length N, checked against the file's size before anything else is read,
// then N bytes of JSON mapping each tensor's name to its dtype, shape and
// data_offsets [begin, end) within the data section that follows (an
// optional "__metadata__" maps strings to strings). The tensors must tile
// the data section exactly, each with the bytes its dtype and shape need.
// No tensor data is read.
func (f *File) indexSafetensors(size int64) error {
	if size < 8 {
		return stErr("%d bytes, too short for the 8-byte header length", size)
	}
	var lenBytes [8]byte
	if _, err := f.r.ReadAt(lenBytes[:], 0); err != nil {
		return fmt.Errorf("reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBytes[:])
	switch {
	case n > uint64(size-8):
		return stErr("header length %d is more than the %d bytes after it", n, size-8)
	case n > maxSafetensorsHeader:
		return stErr("header length %d is more than the %d bytes allowed", n, maxSafetensorsHeader)
	}
	hdr := make([]byte, n)
	if _, err := f.r.ReadAt(hdr, 8); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return fmt.Errorf("reading the header: %w", err)
	}
	dataStart := 8 + int64(n)
	spans, err := f.parseSafetensorsHeader(hdr, dataStart)
	if err != nil {
		return err
	}
	// Sorted by offset, the tensors must follow each other from the start
	// of the data section to the end of the file.
	slices.SortFunc(spans, func(a, b span) int {
		if a.begin != b.begin {
			return cmpUint(a.begin, b.begin)
		}
		return cmpUint(a.end, b.end)
	})
	var at uint64
	for _, s := range spans {
		if s.begin != at {
			return stErr("tensor %q: data_offsets [%d, %d] leave a gap or overlap another tensor (the previous one ends at %d)", s.name, s.begin, s.end, at)
		}
		at = s.end
	}
	if dataLen := uint64(size - dataStart); at != dataLen {
		return stErr("the tensors' data ends at %d, but the data section holds %d bytes", at, dataLen)
	}
	return nil
}

// span is where a tensor's data lies in the data section.
type span struct {
	name       string
	begin, end uint64
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// stEntry is one tensor in a .safetensors header.
type stEntry struct {
	DType       *string    `json:"dtype"`
	Shape       *[]uint64  `json:"shape"`
	DataOffsets *[2]uint64 `json:"data_offsets"`
}

// parseSafetensorsHeader parses the JSON header into f's entries, each
// checked on its own; it returns where their data lies.
func (f *File) parseSafetensorsHeader(hdr []byte, dataStart int64) ([]span, error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, stErr("the header is not a JSON object")
	}
	var spans []span
	metadata := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, stErr("header: %v", err)
		}
		name := tok.(string) // an object's keys are strings
		if _, dup := f.entries[name]; dup || (name == "__metadata__" && metadata) {
			return nil, stErr("%q appears twice in the header", name)
		}
		if name == "__metadata__" {
			metadata = true
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return nil, stErr("__metadata__ is not an object of strings: %v", err)
			}
			continue
		}
		var raw map[string]json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, stErr("tensor %q: %v", name, err)
		}
		e, s, err := safetensorsEntry(name, raw)
		if err != nil {
			return nil, err
		}
		e.off, e.n = dataStart+int64(s.begin), int64(s.end-s.begin)
		f.entries[name] = e
		spans = append(spans, s)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, stErr("header: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, stErr("the header has more after its JSON object")
	}
	return spans, nil
}

// safetensorsEntry checks one tensor's header entry: exactly the keys
// dtype, shape and data_offsets, a known dtype, a shape within
// maxElements, and offsets spanning the bytes that dtype and shape need.
func safetensorsEntry(name string, raw map[string]json.RawMessage) (*entry, span, error) {
	var st stEntry
	for k, v := range raw {
		var err error
		switch k {
		case "dtype":
			err = json.Unmarshal(v, &st.DType)
		case "shape":
			err = json.Unmarshal(v, &st.Shape)
		case "data_offsets":
			err = json.Unmarshal(v, &st.DataOffsets)
		default:
			err = fmt.Errorf("unknown key %q (want dtype, shape and data_offsets)", k)
		}
		if err != nil {
			return nil, span{}, stErr("tensor %q: %s: %v", name, k, err)
		}
	}
	if st.DType == nil || st.Shape == nil || st.DataOffsets == nil {
		return nil, span{}, stErr("tensor %q: want the keys dtype, shape and data_offsets, not null", name)
	}
	size, ok := safetensorsSizes[*st.DType]
	if !ok {
		return nil, span{}, stErr("tensor %q: unknown dtype %q", name, *st.DType)
	}
	shape := make([]int, len(*st.Shape))
	for i, s := range *st.Shape {
		if s > maxElements {
			return nil, span{}, stErr("tensor %q: shape %v is too large", name, *st.Shape)
		}
		shape[i] = int(s)
	}
	elems, err := elements(shape)
	if err != nil {
		return nil, span{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	s := span{name, st.DataOffsets[0], st.DataOffsets[1]}
	need := uint64(elems) * uint64(size)
	if s.end < s.begin || s.end-s.begin != need {
		return nil, span{}, stErr("tensor %q: shape %v of %s needs %d bytes, data_offsets [%d, %d] span %d", name, shape, *st.DType, need, s.begin, s.end, int64(s.end-s.begin))
	}
	if s.end > math.MaxInt64/2 {
		return nil, span{}, stErr("tensor %q: data_offsets [%d, %d] are past any file", name, s.begin, s.end)
	}
	m := &npyMeta{npyHeader: npyHeader{descr: *st.DType, shape: shape}}
	switch *st.DType {
	case "F32", "F64", "F16", "BF16", "BOOL":
		m.typ = npyType{dtype: *st.DType, size: size, order: binary.LittleEndian}
		m.known, m.elems, m.dataBytes = true, elems, int64(need)
	}
	return &entry{meta: m}, s, nil
}
