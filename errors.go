package vkattn

import (
	"errors"
	"fmt"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/vk"
)

// Sentinel errors (package core). Every error vkattn returns for bad input
// wraps exactly one of these, so callers can branch with errors.Is while
// the message still says what was wrong in detail.
var (
	// ErrShape: tensor ranks or extents do not fit together.
	ErrShape = core.ErrShape
	// ErrHeads: the key/value head count does not divide the query head count.
	ErrHeads = core.ErrHeads
	// ErrMask: a mask is not broadcastable to (B, H, L, S), has the wrong
	// number of values, holds NaN or +Inf, or leaves its meaning unset.
	ErrMask = core.ErrMask
	// ErrLengths: per-batch key or query lengths are missing, extra or out of range.
	ErrLengths = core.ErrLengths
	// ErrScale: the custom scale is NaN, infinite or beyond float32's range.
	ErrScale = core.ErrScale
	// ErrOption: an option holds a value outside its defined set.
	ErrOption = core.ErrOption
	// ErrEmpty: an axis has extent zero.
	ErrEmpty = core.ErrEmpty
	// ErrNonFinite: Q, K or V holds NaN or Inf.
	ErrNonFinite = core.ErrNonFinite
	// ErrOverflow: finite inputs whose scores (or output sums) could exceed
	// float32's range, where the kernel would produce Inf or NaN; or a value
	// too large for the half type it is to be stored in.
	ErrOverflow = core.ErrOverflow
	// ErrTooLarge: the problem does not fit the device's limits or memory.
	ErrTooLarge = core.ErrTooLarge
	// ErrClosed: the device or tensor was used after Close.
	ErrClosed = core.ErrClosed
	// ErrDevice: a tensor belongs to another device.
	ErrDevice = core.ErrDevice
	// ErrTuning: a tuning does not fit the device (SetTuning, SaveTuning).
	ErrTuning = core.ErrTuning
	// ErrCapacity: an append would take a KV cache sequence past its
	// capacity, or a truncation past its length.
	ErrCapacity = core.ErrCapacity
	// ErrNoDriver: Open (or Devices) found no Vulkan driver, or no device
	// with a compute queue; the message says how to get one.
	ErrNoDriver = core.ErrNoDriver
)

var errorf = core.Errorf

// driverError makes the vk layer's no-driver error one of vkattn's
// (ErrNoDriver), its message kept.
func driverError(err error) error {
	if errors.Is(err, vk.ErrNoDriver) && !errors.Is(err, ErrNoDriver) {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	return err
}

// VulkanError is a failed Vulkan call: which call, and the VkResult it
// returned (errors.As finds it in an error vkattn returns).
type VulkanError = core.VulkanError
