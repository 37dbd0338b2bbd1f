package weights

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/testutil"
)

// holeFile is a file made of data and holes (runs of zero bytes that take
// no memory), so a test can hold a file of gigabytes. As an io.Writer it
// appends data, or, with skip set, a hole as long as what is written. As
// an io.ReaderAt it counts the bytes it is asked for.
type holeFile struct {
	segs []segment
	size int64
	skip bool
	read atomic.Int64
}

// segment is data, or a hole of n bytes when data is nil.
type segment struct {
	data []byte
	n    int64
}

func (h *holeFile) Write(p []byte) (int, error) {
	if h.skip {
		if k := len(h.segs); k > 0 && h.segs[k-1].data == nil {
			h.segs[k-1].n += int64(len(p))
		} else {
			h.segs = append(h.segs, segment{n: int64(len(p))})
		}
	} else {
		h.segs = append(h.segs, segment{data: bytes.Clone(p), n: int64(len(p))})
	}
	h.size += int64(len(p))
	return len(p), nil
}

func (h *holeFile) ReadAt(p []byte, off int64) (int, error) {
	h.read.Add(int64(len(p)))
	if off >= h.size {
		return 0, io.EOF
	}
	n := 0
	var at int64
	for _, s := range h.segs {
		if n == len(p) {
			break
		}
		if off+int64(n) < at+s.n {
			from := off + int64(n) - at
			k := int(min(int64(len(p)-n), s.n-from))
			if s.data != nil {
				copy(p[n:n+k], s.data[from:])
			} else {
				clear(p[n : n+k])
			}
			n += k
		}
		at += s.n
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// writeSparse writes h to a file, its holes as holes.
func (h *holeFile) writeSparse(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range h.segs {
		if s.data != nil {
			_, err = f.Write(s.data)
		} else {
			_, err = f.Seek(s.n, io.SeekCurrent)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(h.size); err != nil {
		t.Fatal(err)
	}
	return p
}

// bigMember is a stored .npz member whose header declares shape of descr:
// its data is first, then zeros up to the size the header promises.
type bigMember struct {
	name  string
	descr string
	shape []int
	first []byte
}

// hugeNPZ is a .npz of small members (stored as they are) and big ones,
// the big ones' data mostly a hole. Its zip directory tells the truth
// about every size; only the CRCs of the big members are not given.
func hugeNPZ(t *testing.T, small map[string][]byte, big ...bigMember) *holeFile {
	t.Helper()
	h := &holeFile{}
	zw := zip.NewWriter(h)
	if err := testutil.AddNPY(zw, small, false); err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for _, m := range big {
		hdr := npyBytes(npyDict(m.descr, false, m.shape...), m.first)
		typ, _ := parseDescr(m.descr)
		n := int64(typ.size)
		for _, s := range m.shape {
			n *= int64(s)
		}
		size := uint64(len(hdr)) + uint64(n) - uint64(len(m.first))
		w, err := zw.CreateRaw(&zip.FileHeader{Name: m.name + ".npy", Method: zip.Store, CompressedSize64: size, UncompressedSize64: size})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(hdr)
		zw.Flush()
		h.skip = true
		for rest := n - int64(len(m.first)); rest > 0; rest -= int64(len(zeros)) {
			w.Write(zeros[:min(rest, int64(len(zeros)))])
		}
		zw.Flush()
		h.skip = false
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return h
}

// A float64 that float32 cannot hold: a reader that decodes it fails.
var unreadable = f64Bytes(1e300)

// mhaMembers is a packed nn.MultiheadAttention layer of width d as .npy
// members.
func mhaMembers(d int) map[string][]byte {
	m := map[string][]byte{}
	for name, x := range mhaTensors(d, d, d, true, true) {
		m[name] = f32NPY(x.Shape, x.Data)
	}
	return m
}

// A member whose header declares a shape the layer does not want is
// refused from its header: its data (1 GiB, which would fail to decode) is
// never read.
func TestMHARefusesShapeBeforeData(t *testing.T) {
	for _, c := range []struct {
		name  string
		descr string
		err   error
		msg   string
	}{
		{"shape", "<f8", core.ErrShape, "in_proj_weight has shape [8192 16384], want [24 8]"},
		{"dtype", "<i8", ErrUnsupported, "in_proj_weight has dtype <i8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			members := mhaMembers(8)
			delete(members, "in_proj_weight")
			h := hugeNPZ(t, members, bigMember{"in_proj_weight", c.descr, []int{1 << 13, 1 << 14}, unreadable})
			f, err := newFile(h, h.size)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.MHA("", 8, 8, 8)
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want %v saying %q", err, c.err, c.msg)
			}
			if n := h.read.Load(); n > 64<<10 {
				t.Errorf("read %d bytes of a %d-byte file", n, h.size)
			}

			// The same through LoadMHA, on disk.
			p := h.writeSparse(t, "w.npz")
			if _, err := LoadMHA(p, 8, 8, 8); !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), p) {
				t.Fatalf("LoadMHA: err = %v, want %v saying %q", err, c.err, c.msg)
			}
		})
	}
}

// Members the layer does not use are never read, however big and broken
// their data.
func TestMHAIgnoresUnusedMembers(t *testing.T) {
	var big []bigMember
	for _, name := range []string{"decoder.a", "decoder.b", "decoder.c"} {
		big = append(big, bigMember{name, "<f8", []int{1 << 27}, unreadable})
	}
	h := hugeNPZ(t, mhaMembers(8), big...)
	f, err := newFile(h, h.size)
	if err != nil {
		t.Fatal(err)
	}
	w, err := f.MHA("", 8, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.InProjWeight, seq(3*8*8)) {
		t.Fatalf("in_proj_weight %v", w.InProjWeight)
	}
	if n := h.read.Load(); n > 64<<10 {
		t.Errorf("read %d bytes of a %d-byte file", n, h.size)
	}
	if _, err := LoadMHA(h.writeSparse(t, "w.npz"), 8, 8, 8); err != nil {
		t.Fatalf("LoadMHA: %v", err)
	}
	// Load reads everything, so it finds the broken data.
	if _, err := f.Read("decoder.a"); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "outside the float32 range") {
		t.Fatalf("Read of a broken member: %v", err)
	}
}

// A safetensors header length past the end of the file is refused from
// the 8 bytes that give it; one within the file but over the header limit
// is refused before the header is read.
func TestSafetensorsHeaderLength(t *testing.T) {
	small := stRaw([]byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), make([]byte, 4))
	binary.LittleEndian.PutUint64(small, 1<<63)
	h := &holeFile{}
	h.Write(small)
	_, err := newFile(h, h.size)
	want := "header length 9223372036854775808 is more than the 58 bytes after it"
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrFormat saying %q", err, want)
	}
	if n := h.read.Load(); n > 12 {
		t.Errorf("read %d bytes", n)
	}
	p := writeFile(t, "huge.safetensors", small)
	if _, err := LoadMHA(p, 8, 8, 8); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), p+": ") || !strings.Contains(err.Error(), want) {
		t.Fatalf("LoadMHA: %v", err)
	}

	// 200 MB, its header length 150 MB.
	h = &holeFile{}
	h.Write(binary.LittleEndian.AppendUint64(nil, 150e6))
	h.skip = true
	h.Write(make([]byte, 200e6))
	_, err = newFile(h, h.size)
	if want := "header length 150000000 is more than the 100000000 bytes allowed"; !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrFormat saying %q", err, want)
	}
	if n := h.read.Load(); n > 12 {
		t.Errorf("read %d bytes", n)
	}
}

// A safetensors tensor is read from its own offsets: reading one tensor
// reads its bytes and the header, not the rest of the file.
func TestSafetensorsReadsOneTensor(t *testing.T) {
	ts := map[string]stTensor{"a": {"F32", []int{2}, f32Bytes(1, 2)}, "big": {"F32", []int{1 << 20}, make([]byte, 4<<20)}}
	b := stBytes(ts)
	h := &holeFile{}
	h.Write(b)
	f, err := newFile(h, h.size)
	if err != nil {
		t.Fatal(err)
	}
	a, err := f.Read("a")
	if err != nil || !reflect.DeepEqual(a.Data, []float32{1, 2}) {
		t.Fatalf("a = %+v, %v", a, err)
	}
	if n := h.read.Load(); n > int64(len(b)-4<<20+64) {
		t.Errorf("read %d bytes of %d for 8 bytes of data", n, len(b))
	}
	if info, err := f.Info("big"); err != nil || !reflect.DeepEqual(info, Info{Shape: []int{1 << 20}, DType: "F32"}) {
		t.Errorf("Info(big) = %+v, %v", info, err)
	}
	if _, err := f.Read("none"); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "a, big") {
		t.Errorf("Read(none): %v", err)
	}
}

// One File reads at most its limit: a read that would pass it fails
// before reading, naming the limit, in either format and through ReadAll.
func TestTotalLimit(t *testing.T) {
	if MaxTotalBytes != 8<<30 {
		t.Errorf("MaxTotalBytes = %d", MaxTotalBytes)
	}
	members := map[string][]byte{"a": f32NPY([]int{1000}, make([]float32, 1000)), "b": f32NPY([]int{1000}, make([]float32, 1000))}
	st := map[string]stTensor{"a": {"F32", []int{1000}, make([]byte, 4000)}, "b": {"F16", []int{1000}, make([]byte, 2000)}}
	for name, data := range map[string][]byte{"npz": testutil.NPZ(members, false), "deflated npz": testutil.NPZ(members, true), "safetensors": stBytes(st)} {
		t.Run(name, func(t *testing.T) {
			h := &holeFile{}
			h.Write(data)
			f, err := newFile(h, h.size)
			if err != nil {
				t.Fatal(err)
			}
			f.limit = 6000
			if _, err := f.Read("a"); err != nil {
				t.Fatal(err)
			}
			before := h.read.Load()
			_, err = f.Read("b")
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "past the limit of 6000 (MaxTotalBytes)") || !strings.Contains(err.Error(), "b: ") {
				t.Fatalf("second read: %v", err)
			}
			// At most b's .npy header.
			if n := h.read.Load() - before; n > 1024 {
				t.Errorf("read %d bytes of the refused tensor", n)
			}
			g, _ := newFile(bytes.NewReader(data), int64(len(data)))
			g.limit = 6000
			if ts, err := g.ReadAll(); ts != nil || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("ReadAll: %v", err)
			}
		})
	}
}

// A tensor is decoded straight into its result: reading one allocates
// about its float32 size, in every layout (growing the result as the data
// arrives would allocate more than twice that).
func TestReadAllocatesOneCopy(t *testing.T) {
	const n = 2 << 20 // values: 8 MiB of float32
	x := seq(n)
	f64 := make([]float64, n)
	for i, v := range x {
		f64[i] = float64(v)
	}
	files := map[string][]byte{
		"stored npz":         testutil.NPZ(map[string][]byte{"x": f32NPY([]int{1024, n / 1024}, x)}, false),
		"deflated npz":       testutil.NPZ(map[string][]byte{"x": f32NPY([]int{1024, n / 1024}, x)}, true),
		"fortran npz":        testutil.NPZ(map[string][]byte{"x": npyBytes(npyDict("<f4", true, 1024, n/1024), f32Bytes(x...))}, false),
		"float64 npz":        testutil.NPZ(map[string][]byte{"x": npyBytes(npyDict("<f8", false, 1024, n/1024), f64Bytes(f64...))}, false),
		"float32 safetensor": stBytes(map[string]stTensor{"x": {"F32", []int{1024, n / 1024}, f32Bytes(x...)}}),
	}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			ts, err := decode(data)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts["x"].Data) != n {
				t.Fatalf("%d values", len(ts["x"].Data))
			}
			// Beyond the result: buffers, and the deflate reader's tables,
			// remade for each block.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*n+4*n/8+1<<20 {
				t.Errorf("allocated %d bytes for %d bytes of float32", grew, 4*n)
			}
		})
	}
}

// A Fortran-ordered array of any rank is read into row-major order.
func TestReadFortranOrder(t *testing.T) {
	for _, shape := range [][]int{{3, 4}, {2, 3, 4}, {2, 1, 3, 2}, {5, 0, 2}} {
		n := 1
		for _, s := range shape {
			n *= s
		}
		x := seq(n)
		ts, err := decode(testutil.NPZ(map[string][]byte{"x": npyBytes(npyDict("<f4", true, shape...), f32Bytes(x...))}, true))
		if err != nil {
			t.Fatal(err)
		}
		if want := FromFortran(x, shape); !reflect.DeepEqual(ts["x"].Data, want) {
			t.Errorf("shape %v: %v, want %v", shape, ts["x"].Data, want)
		}
	}
}

// A member's sizes in the zip directory must fit the archive: compressed
// bytes within it, stored data as long as it says, deflated data no more
// than deflate can expand. Nothing is allocated for one that does not.
func TestNPZMemberSizes(t *testing.T) {
	hdr := npyBytes(npyDict("<f4", false, 1<<28), nil) // a 1 GiB promise
	declared := uint64(len(hdr)) + 1<<30
	var comp bytes.Buffer
	fw, _ := flate.NewWriter(&comp, flate.BestSpeed)
	fw.Write(hdr)
	fw.Close()
	build := func(method uint16, body []byte, compressed uint64) []byte {
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		w, err := zw.CreateRaw(&zip.FileHeader{Name: "x.npy", Method: method, CRC32: crc32.ChecksumIEEE(hdr),
			CompressedSize64: compressed, UncompressedSize64: declared})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(body)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, c := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"stored, short", build(zip.Store, hdr, uint64(len(hdr))), "stored uncompressed in"},
		{"stored, past the end", build(zip.Store, hdr, declared), "run past the end of the archive"},
		{"deflated beyond deflate", build(zip.Deflate, comp.Bytes(), uint64(comp.Len())), "more than deflate can expand"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := decode(c.data)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `array "x"`) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want ErrFormat naming the array and saying %q", err, c.msg)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("allocated %d bytes", grew)
			}
		})
	}
}

// Values read through a File are exactly Load's, in both formats, and the
// File's layer builders agree with those on a map.
func TestFileMatchesLoad(t *testing.T) {
	dir := filepath.Join("..", "testdata", "mha")
	for _, name := range []string{"self_params.npz", "self_params.safetensors", "cross_params.npz", "cross_params.safetensors"} {
		p := filepath.Join(dir, name)
		ts := mustLoad(t, p)
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, n := range f.Names() {
			x, err := f.Read(n)
			if err != nil || !sameTensor(x, ts[n]) {
				t.Fatalf("%s %s: %+v, %v; Load gives %+v", name, n, x, err, ts[n])
			}
		}
		d := ts["out_proj.weight"].Shape[0]
		kdim, vdim := d, d
		if k, ok := ts["k_proj_weight"]; ok {
			kdim, vdim = k.Shape[1], ts["v_proj_weight"].Shape[1]
		}
		want, err := MHA(ts, "", d, kdim, vdim)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.MHA("", d, kdim, vdim)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: File.MHA %+v, %v; MHA %+v", name, got, err, want)
		}
	}
}
