package vk

import (
	"sync"
	"unsafe"
)

// stagingArea is the one host-visible buffer per device through which the
// reads and writes of unmapped buffers go, with the commands that copy
// through it. It is allocated at the first such transfer, grown to the
// largest transfer up to stagingMax (larger ones go through in pieces) and
// reused: a Write or Read allocates nothing once it exists. The device's
// Close frees it with everything else. Transfers take turns on it.
type stagingArea struct {
	mu   sync.Mutex
	buf  *Buffer
	cmds *Commands
}

// stagingMax bounds the staging buffer (a variable for tests).
var stagingMax uint64 = 32 << 20

// transfer copies host to (write) or from len(host) bytes of b at off. The
// caller holds b and is inside the device.
func (s *stagingArea) transfer(b *Buffer, off uint64, host []byte, write bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := b.dev
	for done := 0; done < len(host); {
		n := min(uint64(len(host)-done), stagingMax)
		if err := s.fit(d, n); err != nil {
			return err
		}
		piece := host[done : done+int(n)]
		staged := unsafe.Slice((*byte)(s.buf.mapped), n)
		at := off + uint64(done)
		if write {
			copy(staged, piece)
			if err := s.cmds.copyAndWait(s.buf, 0, b, at, n); err != nil {
				return err
			}
		} else {
			if err := s.cmds.copyAndWait(b, at, s.buf, 0, n); err != nil {
				return err
			}
			copy(piece, staged)
		}
		done += int(n)
	}
	return nil
}

// fit makes the staging buffer hold at least n bytes: doubled from its
// size (64 KiB at first) up to stagingMax.
func (s *stagingArea) fit(d *Device, n uint64) error {
	if s.cmds == nil {
		c, err := d.NewCommands(0)
		if err != nil {
			return err
		}
		s.cmds = c
	}
	if s.buf != nil && s.buf.size >= n {
		return nil
	}
	size := uint64(64 << 10)
	if s.buf != nil {
		size = 2 * s.buf.size
	}
	for size < n {
		size *= 2
	}
	buf, err := d.newBuffer(min(size, stagingMax), stagingData) // n <= stagingMax
	if err != nil {
		return err
	}
	s.buf.Close() // no copy through it is in flight: each waits
	s.buf = buf
	return nil
}
