package vkattn

import "github.com/vkattn/vkattn/core"

// The public names whose definitions live in package core, the cgo-free
// package the float64 reference shares: problem shapes and options, errors,
// element types, load paths and tunings, RoPE and ALiBi (package nn
// re-exports the layers' parameters). Package core documents each in full.

// The problem's shapes and options (package core, shared with the float64
// reference; SEMANTICS.md defines them).
type (
	// Causal selects a causal mask and, when L != S, how it is aligned.
	Causal = core.Causal
	// MaskMeaning says what true means in a BoolMask; its zero value is
	// invalid on purpose, so the caller must say which.
	MaskMeaning = core.MaskMeaning
	// MaskShape is the shape of a mask over (B, H, L, S): each axis the
	// full extent or 1 (broadcast).
	MaskShape = core.MaskShape
	// Mask is an additive float mask added to the scaled scores.
	Mask = core.Mask
	// BoolMask is a boolean mask whose sense is named by Meaning.
	BoolMask = core.BoolMask
	// Scale overrides the default score scale 1/sqrt(d_k).
	Scale = core.Scale
	// Options are everything about an attention call except Q, K and V.
	Options = core.Options
	// Window is FlashAttention's window_size=(Left, Right), bottom-right
	// aligned; -1 leaves a side unbounded.
	Window = core.Window
	// Dims are the extents of one attention problem.
	Dims = core.Dims
	// MatrixBound is how far the cooperative-matrix path may move a call's
	// outputs from float32 attention's (Plan.MatrixErrorBound).
	MatrixBound = core.MatrixBound
)

const (
	NotCausal         = core.NotCausal
	CausalTopLeft     = core.CausalTopLeft
	CausalBottomRight = core.CausalBottomRight
	TrueAllows        = core.TrueAllows
	TrueBlocks        = core.TrueBlocks
)

// ParseCausal reads the names Causal prints ("none", "top-left", "bottom-right").
func ParseCausal(s string) (Causal, error) { return core.ParseCausal(s) }

// CustomScale returns a Scale that multiplies q.k by x instead of 1/sqrt(d_k).
func CustomScale(x float64) Scale { return core.CustomScale(x) }

// Shape4 fills a shape of rank 2 to 4 to four axes from the left with ones.
func Shape4(shape []int) ([4]int, error) { return core.Shape4(shape) }

// CheckProblem validates Q, K, V shapes and the options against each other
// and returns the problem's Dims; the device and the reference both call
// it, so they accept exactly the same inputs.
func CheckProblem(q, k, v [4]int, opts *Options) (Dims, error) {
	return core.CheckProblem(q, k, v, opts)
}

// FirstNonFinite returns the index of the first NaN or Inf in x, or -1.
func FirstNonFinite(x []float32) int { return core.FirstNonFinite(x) }

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
	// ErrOption: an option holds a value outside its defined set, or
	// options that cannot go together (SEMANTICS.md §9.4).
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
	// ErrDevice: a tensor belongs to another device, or a Vulkan call
	// vkattn needs fails on the device.
	ErrDevice = core.ErrDevice
	// ErrDeviceLost: the device was lost; every later use of it fails
	// with this error.
	ErrDeviceLost = core.ErrDeviceLost
	// ErrTuning: a tuning does not fit the device (SetTuning, SaveTuning).
	ErrTuning = core.ErrTuning
	// ErrCapacity: an append would take a KV cache sequence past its
	// capacity, or a truncation past its length.
	ErrCapacity = core.ErrCapacity
	// ErrNoDriver: Open (or Devices) found no Vulkan driver, or no device
	// with a compute queue; the message says how to get one.
	ErrNoDriver = core.ErrNoDriver
)

// VulkanError is a failed Vulkan call: which call, and the VkResult it
// returned (errors.As finds it in an error vkattn returns).
type VulkanError = core.VulkanError

// DType is the element type a tensor is stored in on the device: float32,
// float16 or bfloat16 (core.DType).
type DType = core.DType

const (
	Float32  = core.Float32
	Float16  = core.Float16  // IEEE binary16: 11-bit significand, |x| <= 65504
	BFloat16 = core.BFloat16 // the upper 16 bits of a float32: 8-bit significand, float32's range
	// Q8_0 is ggml's q8_0 for K and V: int8 quants in blocks of 32 along a
	// row, each block with a float16 scale (SEMANTICS.md §9.2).
	Q8_0 = core.Q8_0
	// Q4_0 is ggml's q4_0 for K and V: 4-bit quants in blocks of 32 along a
	// row, each read as (q - 8) times the block's float16 scale
	// (SEMANTICS.md §9.2).
	Q4_0 = core.Q4_0
	// IQ4_NL is ggml's iq4_nl for K and V: 4-bit indices in blocks of 32
	// along a row into 16 fixed non-linear levels, times the block's
	// float16 scale (SEMANTICS.md §9.2).
	IQ4_NL = core.IQ4_NL
)

// ParseDType reads an element type: f32, f16 or bf16 (or float32, float16,
// bfloat16), or q8_0, q4_0 or iq4_nl.
func ParseDType(s string) (DType, error) { return core.ParseDType(s) }

// ToFloat16 rounds x to the nearest float16 (ties to even), subnormals
// included, and returns its bits. A NaN or Inf is ErrNonFinite; a finite x
// that rounds beyond 65504 (|x| >= 65520) is ErrOverflow, never a silent
// Inf.
func ToFloat16(x float32) (uint16, error) { return core.ToFloat16(x) }

// ToBFloat16 rounds x to the nearest bfloat16 (ties to even) and returns
// its bits: the upper 16 bits of the rounded float32. NaN or Inf is
// ErrNonFinite; a finite x that rounds beyond the largest bfloat16
// (3.3895314e38) is ErrOverflow.
func ToBFloat16(x float32) (uint16, error) { return core.ToBFloat16(x) }

// Round returns data rounded to element type t as float32 values: what a
// tensor of type t uploaded from data holds, so a reference computed on
// them is the reference of the device's result.
func Round(t DType, data []float32) ([]float32, error) { return core.Round(t, data) }

// LoadPath is how the attention kernel reads Q, K, V and masks; the planner
// picks it per device unless Config forces one.
type LoadPath = core.LoadPath

// KernelLayout is the layout of a planned attention kernel (bounds, rows,
// tiles, splits, chunks, grid), embedded in KernelPlan.
type KernelLayout = core.KernelLayout

const (
	AutoLoadPath    = core.AutoLoadPath
	TexelLoadPath   = core.TexelLoadPath
	StorageLoadPath = core.StorageLoadPath
)

// ParseLoadPath reads the names a LoadPath prints: auto, texel or storage.
func ParseLoadPath(s string) (LoadPath, error) { return core.ParseLoadPath(s) }

// DeviceInfo describes a Vulkan device: name, type, driver, limits and
// the features vkattn plans with.
type DeviceInfo = core.DeviceInfo

// PlanAsVendors are the names Config.PlanAs takes.
var PlanAsVendors = core.PlanAsVendors

// Tuning is how the planner launches the attention kernel on a device:
// preferred load path, query rows per invocation, workgroup size, split-K
// chunk. Device.Tuning says which is in use.
type Tuning = core.Tuning

// PathTuning and TiledTuning are a Tuning's shapes of the row kernels on
// one load path and of the tiled GPU kernels.
type (
	PathTuning  = core.PathTuning
	TiledTuning = core.TiledTuning
)

// Rotary position embeddings (package core; SEMANTICS.md §5).
type (
	// RoPE rotates Q and K by their positions before the scores.
	RoPE = core.RoPE
	// RoPEStyle pairs the rotated elements of a row.
	RoPEStyle = core.RoPEStyle
	// RoPEScaling changes a RoPE's frequencies for long contexts.
	RoPEScaling = core.RoPEScaling
	// RoPEScalingKind names a frequency scaling.
	RoPEScalingKind = core.RoPEScalingKind
)

const (
	RoPEHalf        = core.RoPEHalf
	RoPEInterleaved = core.RoPEInterleaved
	NoRoPEScaling   = core.NoRoPEScaling
	RoPELinear      = core.RoPELinear
	RoPELlama3      = core.RoPELlama3
)

// ParseRoPEStyle reads "half" and "interleaved".
func ParseRoPEStyle(s string) (RoPEStyle, error) { return core.ParseRoPEStyle(s) }

// ParseRoPEScaling reads "none", "linear:F" and "llama3:F,LOW,HIGH,ORIG".
func ParseRoPEScaling(s string) (RoPEScaling, error) { return core.ParseRoPEScaling(s) }

// MaxHeadWidth is the widest d_k or d_v the attention kernels take; a
// wider head is refused with ErrTooLarge.
const MaxHeadWidth = core.MaxHeadWidth

// MaxALiBiHeads bounds ALiBiSlopes (2^24 heads, far beyond any model).
const MaxALiBiHeads = core.MaxALiBiHeads

// ALiBiSlopes are the ALiBi slopes of h heads (Press et al., 2022); nil for
// h below 1 or beyond MaxALiBiHeads. SEMANTICS.md §4.1.
func ALiBiSlopes(h int) []float32 { return core.ALiBiSlopes(h) }
