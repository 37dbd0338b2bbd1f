package vk

import (
	"errors"
	"fmt"

	vulkan "github.com/vulkan-go/vulkan"
)

// Foreign is a Commands over a command buffer that another owner (a host
// program, on a device it shares) allocated, begins, ends and submits:
// dispatches, copies, updates and barriers are recorded into it as into
// vkattn's own, but Begin, End and Submit are refused and Close frees
// nothing. The buffers it uses are not held: the owner keeps them open
// until its submission has finished.
func (d *Device) Foreign(cmd vulkan.CommandBuffer) (*Commands, error) {
	if cmd == nil {
		return nil, errors.New("vk: a host's command buffer is required")
	}
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	d.mu.Lock()
	d.recordedForeign = true
	d.mu.Unlock()
	return &Commands{dev: d, cmd: cmd, uses: map[*Buffer]struct{}{}, open: true, foreign: true}, nil
}

// errForeign refuses what only the owner of a foreign command buffer does.
func (c *Commands) errForeign(what string) error {
	return fmt.Errorf("vk: %s of a host's command buffer is its owner's", what)
}

// Done reports the first error recording into c met (nil: everything
// recorded), the counterpart of End for a foreign command buffer.
func (c *Commands) Done() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// RecordedForeign reports whether anything was recorded into a host's
// command buffer on d (Foreign): work vkattn cannot wait for, so freeing
// memory such work may use waits for the whole device (WaitIdle).
func (d *Device) RecordedForeign() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.recordedForeign
}
