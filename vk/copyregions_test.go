package vk

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// CopyRegions copies every region in one command (a scatter: regions out
// of order, of different sizes), records nothing for none, and refuses a
// region outside either buffer or of no bytes before recording.
func TestCopyRegions(t *testing.T) {
	inst, dev, before := openTestDevice(t)
	src, err := dev.NewHostBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := dev.NewBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i + 1)
	}
	if err := src.Write(0, data); err != nil {
		t.Fatal(err)
	}
	if err := dst.Write(0, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	c, err := dev.NewCommands(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Begin(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]Region{{{Src: 60, Dst: 0, Size: 8}}, {{Src: 0, Dst: 60, Size: 8}}, {{Src: 0, Dst: 0, Size: 0}}, {{Src: 1 << 63, Dst: 0, Size: 1 << 63}}} {
		if err := c.CopyRegions(src, dst, bad); err == nil || !strings.Contains(err.Error(), "copy region") {
			t.Errorf("regions %v: %v, want a refusal", bad, err)
		}
	}
	if err := c.CopyRegions(src, dst, nil); err != nil {
		t.Errorf("no regions: %v", err)
	}
	if err := c.CopyRegions(src, dst, []Region{{Src: 32, Dst: 0, Size: 16}, {Src: 0, Dst: 40, Size: 4}, {Src: 8, Dst: 20, Size: 12}}); err != nil {
		t.Fatal(err)
	}
	if err := c.End(); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	got := make([]byte, 64)
	if err := dst.Read(0, got); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 64)
	copy(want[0:16], data[32:48])
	copy(want[40:44], data[0:4])
	copy(want[20:32], data[8:20])
	if !bytes.Equal(got, want) {
		t.Errorf("after the copies:\n got %v\nwant %v", got, want)
	}
	src.Close()
	dst.Close()
	closeTestDevice(t, inst, dev, before)
}
