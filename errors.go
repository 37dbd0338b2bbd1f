package vkattn

import (
	"errors"
	"fmt"

	"github.com/vkattn/vkattn/vk"
)

// Sentinel errors. Every error vkattn returns for bad input wraps exactly one
// of these, so callers can branch with errors.Is while the message still says
// what was wrong in detail.
var (
	// ErrShape: tensor ranks or extents do not fit together.
	ErrShape = errors.New("vkattn: shape mismatch")
	// ErrHeads: the key/value head count does not divide the query head count.
	ErrHeads = errors.New("vkattn: head counts incompatible")
	// ErrMask: a mask is not broadcastable to (B, H, L, S), has the wrong
	// number of values, holds NaN or +Inf, or leaves its meaning unset.
	ErrMask = errors.New("vkattn: invalid mask")
	// ErrLengths: per-batch key or query lengths are missing, extra or out of range.
	ErrLengths = errors.New("vkattn: invalid sequence lengths")
	// ErrScale: the custom scale is NaN, infinite or beyond float32's range.
	ErrScale = errors.New("vkattn: invalid scale")
	// ErrOption: an option holds a value outside its defined set (an
	// unknown Causal alignment).
	ErrOption = errors.New("vkattn: invalid option")
	// ErrEmpty: an axis has extent zero.
	ErrEmpty = errors.New("vkattn: empty axis")
	// ErrNonFinite: Q, K or V holds NaN or Inf.
	ErrNonFinite = errors.New("vkattn: non-finite input")
	// ErrOverflow: finite inputs whose scores (or output sums) could exceed
	// float32's range, where the kernel would produce Inf or NaN; or a value
	// too large for the half type it is to be stored in.
	ErrOverflow = errors.New("vkattn: overflow")
	// ErrTooLarge: the problem does not fit the device's limits.
	ErrTooLarge = errors.New("vkattn: too large for device")
	// ErrClosed: the device or tensor was used after Close.
	ErrClosed = errors.New("vkattn: use after Close")
	// ErrDevice: a tensor belongs to another device.
	ErrDevice = errors.New("vkattn: wrong device")
	// ErrNoDriver: Open (or Devices) found no Vulkan driver, or no device
	// with a compute queue; the message says how to get one.
	ErrNoDriver = vk.ErrNoDriver
	// ErrTuning: a tuning does not fit the device (SetTuning, SaveTuning).
	ErrTuning = errors.New("vkattn: invalid tuning")
)

func errorf(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}
