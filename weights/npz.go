package weights

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"strings"
)

// indexNPZ reads the zip directory of a .npz archive; no member is opened.
func (f *File) indexNPZ(size int64) error {
	zr, err := zip.NewReader(f.r, size)
	if err != nil {
		return formatErr("not a valid .npz file: %v", err)
	}
	for _, zf := range zr.File {
		name := strings.TrimSuffix(zf.Name, ".npy")
		if _, dup := f.entries[name]; dup {
			return formatErr("array %q appears twice", name)
		}
		f.entries[name] = &entry{zf: zf}
	}
	return nil
}

// openMember opens a .npz member and reads its .npy header, leaving the
// returned reader at the data. The zip directory's uncompressed size must
// be what the header needs, so a member that would inflate to more (a zip
// bomb) fails after its header, not after inflating; the zip reader itself
// refuses to inflate past the declared size.
func (f *File) openMember(name string, e *entry) (io.ReadCloser, npyMeta, error) {
	zf := e.zf
	if zf.UncompressedSize64 > uint64(12+maxHeaderBytes+maxDataBytes) {
		return nil, npyMeta{}, formatErr("array %q: the zip directory says it inflates to %d bytes, more than a .npy array may hold", name, zf.UncompressedSize64)
	}
	if err := checkSizes(zf, f.size); err != nil {
		return nil, npyMeta{}, formatErr("array %q: %v", name, err)
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, npyMeta{}, formatErr("array %q: %v", name, err)
	}
	m, err := readNPYHeader(rc, int64(zf.UncompressedSize64))
	if err == nil {
		err = f.charge(name, m.headerBytes)
	}
	if err != nil {
		rc.Close()
		return nil, npyMeta{}, memberErr(name, zf, err)
	}
	return rc, m, nil
}

// readMember reads a .npz member: its header, checked against the limit,
// then its data, straight into the result.
func (f *File) readMember(name string, e *entry) (Tensor, error) {
	rc, m, err := f.openMember(name, e)
	if err != nil {
		return Tensor{}, err
	}
	defer rc.Close()
	e.meta = &m
	return f.readData(name, &m, func(data []float32) error {
		err := readInto(rc, data, m)
		if err == nil {
			err = expectEnd(rc, m)
		}
		if err != nil {
			return memberErr(name, e.zf, err)
		}
		return nil
	})
}

// maxDeflateRatio is the most deflate can expand: a 258-byte match in two
// bits.
const maxDeflateRatio = 1032

// checkSizes checks a member's sizes in the zip directory against its data
// in the archive (size bytes): the compressed bytes must lie within the
// archive and could inflate to the declared size, so that the data's
// buffer, allocated from the declared size, is sized by bytes that exist.
func checkSizes(zf *zip.File, size int64) error {
	off, err := zf.DataOffset()
	if err != nil {
		return err
	}
	switch c, u := zf.CompressedSize64, zf.UncompressedSize64; {
	case off < 0 || c > uint64(size) || uint64(off) > uint64(size)-c:
		return fmt.Errorf("its %d compressed bytes at offset %d run past the end of the archive (%d bytes)", c, off, size)
	case zf.Method == zip.Store && u != c:
		return fmt.Errorf("it is stored uncompressed in %d bytes, but the zip directory says it holds %d", c, u)
	case zf.Method == zip.Deflate && u > 1024 && (u-1024)/maxDeflateRatio > c:
		return fmt.Errorf("the zip directory says its %d deflated bytes inflate to %d, more than deflate can expand", c, u)
	}
	return nil
}

// memberErr describes what went wrong reading a .npz member.
func memberErr(name string, zf *zip.File, err error) error {
	switch {
	case errors.Is(err, ErrUnsupported):
		return err
	case errors.Is(err, ErrFormat):
		return fmt.Errorf("array %q: not a valid .npy member: %w", name, err)
	case errors.Is(err, zip.ErrFormat):
		// What the zip reader says when a member inflates past its size.
		return formatErr("array %q: inflates past the %d bytes its zip entry declares", name, zf.UncompressedSize64)
	default:
		// A damaged deflate stream or a CRC mismatch.
		return formatErr("array %q: %v", name, err)
	}
}
