// Package vkattn computes scaled dot-product attention on any Vulkan device:
// AMD, Intel and NVIDIA GPUs, and lavapipe, Mesa's CPU driver. The kernels
// are GLSL compute shaders compiled to SPIR-V and embedded in the binary; a
// float64 reference (package reference) checks every result in the tests.
//
// # The computation
//
// For queries Q (B, H, L, d_k), keys K (B, H_kv, S, d_k) and values
// V (B, H_kv, S, d_v):
//
//	O = softmax(Q K^T * scale + M) V      O: (B, H, L, d_v)
//
// with scale = 1/sqrt(d_k) unless Options.Scale overrides it. H_kv must
// divide H: query head h reads key/value head h / (H/H_kv), which covers
// multi-head (H_kv = H), grouped-query and multi-query (H_kv = 1) attention.
// The kernel is fused: it walks keys in tiles with a running maximum and sum
// (online softmax) and never stores the L x S scores. On GPUs it is
// workgroup-tiled (K/V tiles in shared memory, lanes splitting the head
// dimension, split-K for decode); on lavapipe a row kernel reads through
// texel buffers. Config.PlanAs (or VKATTN_PLAN_AS) plans as another
// vendor's driver on any device, so the GPU kernels run on lavapipe too.
//
// # Masks
//
// Every mask kind may be given at once; they combine (additive masks add,
// blocks AND):
//
//	Options.Mask          additive float, broadcast over (B,H,L,S); -Inf blocks
//	Options.BoolMasks     boolean, any number, each broadcast likewise; each
//	                      Meaning must say TrueAllows or TrueBlocks (the zero
//	                      value is an error); a key is visible only where
//	                      every one allows it
//	Options.Causal        CausalTopLeft: query t sees keys j <= t;
//	                      CausalBottomRight: j <= t + S - L (KV-cache decoding)
//	Options.KeyLengths    keys j >= KeyLengths[b] are masked
//	Options.QueryLengths  rows t >= QueryLengths[b] are padding
//
// The default is NotCausal. Causal alignment uses the full extents L and S,
// not the per-batch lengths. A row with no visible key, and a padded query
// row, has output zeros and log-sum-exp -Inf; vkattn never returns NaN for
// it. The reference package defines the same.
//
// # Use
//
// Open a device, upload tensors, call Attention, download the output, Close:
//
//	dev, err := vkattn.Open(vkattn.Config{})  // best device; Config.Device picks one
//	q, err := dev.Upload([]int{B, H, L, dk}, qData)
//	...
//	out, err := dev.Attention(q, k, v, vkattn.Options{Causal: vkattn.CausalBottomRight})
//	o, err := out.O.Download()
//
// Shapes of rank 2 (L, d) and 3 (H, L, d) are filled from the left with
// ones. Device.Prepare records a call once for repeated runs (Call.Run,
// Tensor.Write for new inputs). Data laid out as (B, L, H, d) is read in place through
// Tensor.SwapAxes12. Device.Plan says which kernel variant, load path,
// tiles and grid a problem gets, without running it.
//
// # Models: rotary embeddings and 8-bit KV caches
//
// Options.RoPE rotates Q and K by their positions before the scores, on
// the device (both pair styles, partial rotation, linear and Llama 3
// frequency scaling, cos and sin from float64 angles); KVCacheConfig.RoPE
// rotates each key once as it is appended and every call's queries at
// their positions. KVCacheConfig.DType = Q8_0 stores K and V as ggml's
// q8_0 (int8 blocks of 32 with float16 scales, 0.53x the bytes of
// float16), which every kernel reads directly. SEMANTICS.md §17 and §8.2
// define both.
//
// # Goroutines, cancellation and Close
//
// A Device is meant to be shared, like an *sql.DB: it and everything made
// on it (tensors, calls, layers) are safe for concurrent use. Calls from
// different goroutines record and wait independently and take turns only
// at queue submission; runs of one prepared Call take turns.
//
// AttentionContext (and every *Context method) submits nothing for a done
// context; a context done while the work runs returns with the context's
// error (at a deadline, within milliseconds of it; on a cancel, within
// 50 ms), and the work finishes in the background, its
// buffers kept alive until it does. Tensors may be closed at any time: a
// buffer still read by work in flight is freed when that work ends, and a
// prepared Call whose inputs were closed refuses to run (ErrClosed).
//
// Device.Close waits for work in flight and frees everything made on the
// device, open calls included; afterwards every use returns an error
// wrapping ErrClosed and every Close is a no-op. LiveObjects is zero once
// every device is closed.
//
// # Errors
//
// Invalid input returns an error wrapping one of ErrShape, ErrHeads,
// ErrMask, ErrLengths, ErrScale, ErrOption, ErrEmpty, ErrNonFinite,
// ErrOverflow, ErrTooLarge, ErrClosed, ErrDevice, ErrCapacity (a KV cache
// full, or a truncation past a length) or ErrTuning (a tuning that does
// not fit the device); ErrNoDriver when no Vulkan driver or device is
// found (test with errors.Is). A device whose memory is used up (a heap,
// Config.MemoryLimit or maxMemoryAllocationCount) is ErrTooLarge naming
// the heap; a failed Vulkan call returns a *VulkanError naming the call
// and its VkResult (errors.As).
// Nothing panics on bad input, and no value of an exported enum or
// config field panics: one outside its set is ErrOption.
//
// # Round trips
//
// Each queue submission and host wait is a round trip to the device, tens
// of microseconds on a discrete GPU. A prepared Call's Run is one; a
// KVCache's DecodeStep.Run is one for the whole step (append, attention,
// O back); Append and AppendTensors are one whatever B and HKV. What a
// one-shot call frees serves the next one of its kind, so in steady state
// it allocates nothing. Device.Stats counts all of it; Config.Memory =
// DiscreteMemory (implied by PlanAs) makes lavapipe count as a GPU would.
//
// The kernels compute in float32. Prepare refuses (ErrOverflow) a call
// whose scores, output sums or projections could exceed float32's range,
// from magnitude bounds of its inputs: Upload records each tensor's
// largest |value|, and Write may store up to the larger of that and 2^32.
// Outputs carry bounds too (O within its V's, weights within [0, 1], MHA
// outputs from the layer's weights), so chained calls are checked; a
// log-sum-exp may hold -Inf and is refused as an input (ErrNonFinite).
package vkattn
