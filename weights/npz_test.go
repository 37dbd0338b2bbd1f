package weights

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"strings"
	"testing"
)

// TestNPZInflationBomb: a 1 MB .npz whose member inflates to 1 GiB behind a
// header promising 8 bytes fails after the header, allocating next to
// nothing (issue 11: it reached 2.7 GB resident before failing).
func TestNPZInflationBomb(t *testing.T) {
	const inflated = 1 << 30 // data bytes after the header
	hdr := npyBytes(npyDict("<f4", false, 2), nil)
	var comp bytes.Buffer
	fw, err := flate.NewWriter(&comp, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	crcAll := crc32.NewIEEE()
	w := io.MultiWriter(fw, crcAll)
	w.Write(hdr)
	zeros := make([]byte, 1<<20)
	for n := 0; n < inflated; n += len(zeros) {
		w.Write(zeros)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	head := uint64(len(hdr) + 8) // what the header needs
	build := func(declared uint64, crc uint32) []byte {
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		fw, err := zw.CreateRaw(&zip.FileHeader{Name: "x.npy", Method: zip.Deflate, CRC32: crc,
			CompressedSize64: uint64(comp.Len()), UncompressedSize64: declared})
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(comp.Bytes())
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, c := range []struct {
		name     string
		declared uint64
		crc      uint32
		msg      string
	}{
		// The zip directory tells the truth: refused on reading the header.
		{"true size", uint64(len(hdr)) + inflated, crcAll.Sum32(), "shape [2] of <f4 needs 8 data bytes, there are 1073741824"},
		// It claims what the header needs: the zip reader stops there.
		{"understated size", head, crc32.ChecksumIEEE(append(hdr, zeros[:8]...)), fmt.Sprintf("inflates past the %d bytes its zip entry declares", head)},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := build(c.declared, c.crc)
			if len(data) > 2<<20 {
				t.Fatalf("the test archive is %d bytes", len(data))
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := decode(data)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `array "x"`) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %v, want ErrFormat naming the array and saying %q", err, c.msg)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("allocated %d bytes for a member that inflates to %d", grew, inflated)
			}
		})
	}
}
