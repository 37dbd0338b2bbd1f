package vk

import (
	"bytes"
	"testing"
)

// Fill sets a byte range of a buffer to copies of a word on the device,
// leaving the rest as it was, and refuses a range that is not whole words
// inside the buffer.
func TestFill(t *testing.T) {
	inst, dev, before := openTestDevice(t)
	defer closeTestDevice(t, inst, dev, before)
	b, err := dev.NewBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Write(0, bytes.Repeat([]byte{0xab}, 64)); err != nil {
		t.Fatal(err)
	}
	if err := dev.Once(func(c *Commands) error { return c.Fill(b, 8, 48, 0x01020304) }); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	if err := b.Read(0, got); err != nil {
		t.Fatal(err)
	}
	want := append(append(bytes.Repeat([]byte{0xab}, 8), bytes.Repeat([]byte{4, 3, 2, 1}, 12)...), bytes.Repeat([]byte{0xab}, 8)...)
	if !bytes.Equal(got, want) {
		t.Errorf("after Fill of bytes [8, 56) with 0x01020304: % x, want % x", got, want)
	}
	for _, r := range [][2]uint64{{0, 0}, {2, 8}, {0, 6}, {0, 68}, {64, 4}, {1 << 63, 1 << 63}} {
		err := dev.Once(func(c *Commands) error { return c.Fill(b, r[0], r[1], 0) })
		if err == nil {
			t.Errorf("Fill of %d bytes at %d into a 64-byte buffer: no error", r[1], r[0])
		}
	}
}
