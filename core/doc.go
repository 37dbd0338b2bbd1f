// Package core is what vkattn's users, its device code and its float64
// reference share: the shapes and options of an attention problem, masks,
// the sentinel errors, element types and their conversions, the layers'
// parameters and the checks that decide which problems are valid. It is
// plain Go: it needs no cgo and no Vulkan driver, so the reference and
// the weights readers build and test without either. Package vkattn
// re-exports all of it; programs use it through vkattn.
package core
