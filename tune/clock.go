package tune

import (
	"fmt"
	"sync"
	"time"
)

// Clock follows the calls of interruptible work, so that a signal can
// say how long the one in flight (which the device cannot abandon) should
// still take, from the time of the one before. A nil Clock follows nothing.
type Clock struct {
	mu    sync.Mutex
	start time.Time     // of the call in flight; zero when none
	cold  bool          // it is the first of its kernel variant (compiles it)
	last  time.Duration // the last warm call's wall time, 0 before one
	first time.Duration // the last cold call's, compiling included
}

// Begin says a call starts; cold: the first of its kernel variant, after
// which warm calls of another variant say nothing of the next ones.
func (c *Clock) Begin(cold bool) {
	c.locked(func() {
		c.start, c.cold = time.Now(), cold
		if cold {
			c.last = 0
		}
	})
}

// Lap says the call in flight ended and the next, warm one starts.
func (c *Clock) Lap() {
	c.locked(func() {
		c.recordLocked()
		c.start, c.cold = time.Now(), false
	})
}

// Done says the call in flight ended.
func (c *Clock) Done() {
	c.locked(func() {
		c.recordLocked()
		c.start = time.Time{}
	})
}

// Idle says no call is in flight (after a Lap that started none).
func (c *Clock) Idle() { c.locked(func() { c.start = time.Time{} }) }

// locked runs f holding c's lock; on a nil Clock it does nothing.
func (c *Clock) locked(f func()) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

func (c *Clock) recordLocked() {
	if c.start.IsZero() {
		return
	}
	if d := time.Since(c.start); c.cold {
		c.first = d
	} else {
		c.last = d
	}
}

// Estimate says what stopping waits for: nothing, or the call in flight
// and how long it should still take.
func (c *Clock) Estimate() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		return "stopping"
	}
	ran := time.Since(c.start)
	running := fmt.Sprintf("stopping at the next submission of the call in flight (a long call is submitted in parts; one on the device, or a kernel compiling, cannot be stopped), running for %s", roundDur(ran))
	switch {
	case c.cold && c.first > 0:
		return fmt.Sprintf("%s; it is the first of its kernel variant, which compiles it (the last such call took %s)", running, roundDur(c.first))
	case c.cold:
		return running + "; it is the first of its kernel variant, which compiles it"
	case c.last > 0 && ran > c.last:
		return fmt.Sprintf("%s, longer than the last call (%s)", running, roundDur(c.last))
	case c.last > 0 && c.last-ran < time.Second:
		return "stopping"
	case c.last > 0:
		return fmt.Sprintf("%s: about %s more (the last call took %s)", running, roundDur(c.last-ran), roundDur(c.last))
	case c.first > 0 && c.first-ran >= time.Second:
		return fmt.Sprintf("%s: at most about %s more (the first call, compiling included, took %s)", running, roundDur(c.first-ran), roundDur(c.first))
	}
	return running
}

func roundDur(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}
