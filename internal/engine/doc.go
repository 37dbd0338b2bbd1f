// Package engine is what vkattn's public packages share: the device and
// its tensors, the call builder that puts every prepared call together
// and lowers it into kernel arguments, planning, and the attention
// operations (forward, backward, varlen, merge, RoPE) with their range
// checks.
//
// Package vkattn re-exports its types as aliases (vkattn.Device is
// engine.Device), so each exported method of those types is public API.
// Packages kv and nn, which build the KV cache and the layers on the
// same devices and tensors, use what else they need through the
// package-level functions of internals.go, which vkattn does not
// re-export.
package engine
