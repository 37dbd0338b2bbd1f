package core

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error vkattn returns for bad input wraps exactly one
// of these, so callers can branch with errors.Is while the message still says
// what was wrong in detail.
var (
	// ErrShape: tensor ranks or extents do not fit together.
	ErrShape = sentinel("shape mismatch")
	// ErrHeads: the key/value head count does not divide the query head count.
	ErrHeads = sentinel("head counts incompatible")
	// ErrMask: a mask is not broadcastable to (B, H, L, S), has the wrong
	// number of values, holds NaN or +Inf, or leaves its meaning unset.
	ErrMask = sentinel("invalid mask")
	// ErrLengths: per-batch key or query lengths are missing, extra or out of range.
	ErrLengths = sentinel("invalid sequence lengths")
	// ErrScale: the custom scale is NaN, infinite or beyond float32's range.
	ErrScale = sentinel("invalid scale")
	// ErrOption: an option holds a value outside its defined set, or
	// options that cannot go together (SEMANTICS.md §9.4).
	ErrOption = sentinel("invalid option")
	// ErrEmpty: an axis has extent zero.
	ErrEmpty = sentinel("empty axis")
	// ErrNonFinite: Q, K or V holds NaN or Inf.
	ErrNonFinite = sentinel("non-finite input")
	// ErrOverflow: finite inputs whose scores (or output sums) could exceed
	// float32's range, where the kernel would produce Inf or NaN; or a value
	// too large for the half type it is to be stored in.
	ErrOverflow = sentinel("overflow")
	// ErrTooLarge: the problem does not fit the device's limits or memory.
	ErrTooLarge = sentinel("too large for device")
	// ErrClosed: the device or tensor was used after Close.
	ErrClosed = sentinel("use after Close")
	// ErrDevice: a tensor belongs to another device, or a Vulkan call
	// vkattn needs fails on the device (VK_ERROR_INITIALIZATION_FAILED,
	// ...; out of memory is ErrTooLarge, a lost device ErrDeviceLost).
	ErrDevice = sentinel("wrong device")
	// ErrDeviceLost: the device was lost (VK_ERROR_DEVICE_LOST: a driver
	// reset, a GPU watchdog): its work is gone, and every later use of
	// it fails at once with this error; Close still frees what it can.
	ErrDeviceLost = sentinel("device lost")
	// ErrTuning: a tuning does not fit the device (SetTuning, SaveTuning).
	ErrTuning = sentinel("invalid tuning")
	// ErrCapacity: an append would take a KV cache sequence past its
	// capacity, or a truncation past its length.
	ErrCapacity = sentinel("KV cache capacity")
	// ErrNoDriver: no Vulkan driver was found, or no device with a compute
	// queue; the message says how to get one.
	ErrNoDriver = sentinel("no Vulkan device")
)

// sentinel makes one of the sentinels above; its message names the package.
func sentinel(what string) error { return errors.New("vkattn: " + what) }

// Errorf is an error wrapping the sentinel kind, its message formatted
// from format and args.
func Errorf(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}
