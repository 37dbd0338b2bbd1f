// Package vkattn computes scaled dot-product attention on any Vulkan device:
// AMD, Intel and NVIDIA GPUs, and lavapipe, Mesa's CPU driver. The kernels
// are GLSL compute shaders compiled to SPIR-V and embedded in the binary; a
// float64 reference (package reference) checks every result in the tests.
//
// For queries Q (B, H, L, d_k), keys K (B, H_kv, S, d_k) and values
// V (B, H_kv, S, d_v) a call returns
//
//	O = softmax(Q K^T * scale + M) V      O: (B, H, L, d_v)
//
// SEMANTICS.md in the repository is the contract: the scale, heads
// (grouped-query and multi-query included), every mask and its polarity,
// causal alignment, fully masked and padded rows, the element types, the
// range rules, the errors and the tolerances. This comment shows how to
// use the package and points there for what each call means.
//
// # Use
//
// Open a device, upload tensors, call Attention, download the output, Close:
//
//	dev, err := vkattn.Open(vkattn.Config{})  // best device; Config.Device picks one
//	defer dev.Close()                         // frees every tensor and call made on it
//	q, err := dev.Upload([]int{B, H, L, dk}, qData)
//	...
//	out, err := dev.Attention(q, k, v, vkattn.Options{Causal: vkattn.CausalBottomRight})
//	o, err := out.O.Download()                // (B, H, L, dv)
//
// Shapes of rank 2 (L, d) and 3 (H, L, d) are filled from the left with
// ones; data laid out (B, L, H, d) is read in place through
// Tensor.SwapAxes12, and multi-head latent attention's V, the leading
// columns of its latent K, through K.Columns(0, d_v), which the kernels
// read from K's rows (SEMANTICS.md §2; its scale is the model's, §3).
// Options holds the masks (Mask, BoolMasks, Causal,
// KeyLengths, QueryLengths: SEMANTICS.md §4), the score variants (Window,
// Softcap, ALiBi, Sinks: §4.1), rotary embeddings (RoPE: §5) and the
// extra outputs (WantLSE, WantWeights: §7). Device.Plan says which kernel
// variant, load path, tiles and grid a problem gets, without running it;
// Plan.Explain says it in words.
//
// A call repeated with new data is prepared once: Device.Prepare allocates
// the outputs and records the dispatch, then Tensor.Write and Call.Run
// replay it with no allocation (Call.Output, Call.Close). A one-shot
// Attention on shapes seen before allocates nothing either: the buffers,
// descriptor sets and command buffers a call frees are kept (buffers up
// to 4 MiB, 64 MiB in all) for the next call and freed by Device.Close.
// Device.AttentionVarlen takes packed sequences of different lengths
// without padding (SEMANTICS.md §4.2); over a KV cache, package kv's
// ragged step does so for a server's users, each sequence bringing its
// own number of new tokens a step (§4.3).
//
// # Element types
//
// Q, K and V may each be float32, float16 or bfloat16, and K and V q8_0,
// q4_0 or iq4_nl (ggml's 8-bit, 4-bit and 4-bit non-linear blocks of 32,
// read directly):
// Device.UploadAs rounds or quantizes float32 data to the type,
// Device.UploadBits stores bit patterns already held, Device.PlanAs plans
// for given types.
// The kernels widen on load and compute in float32 (SEMANTICS.md §9.1,
// §9.2; §9.3 for the cooperative matrices that half inputs use where the
// device has them, and Options.Float32Products to keep them off).
//
// # Training: the backward pass
//
//	g, err := dev.AttentionBackward(q, k, v, dO, opts) // dQ, dK, dV (and dSinks) of sum(O * dO)
//	dq, err := g.DQ.Download()
//
// The probabilities are recomputed from the forward's log-sum-exp (nothing
// L x S is stored), every mask, length and score variant applies, and the
// sums run in a fixed order, so the gradients are the same bits run to run
// (SEMANTICS.md §10).
//
// # The KV cache and the layers
//
// Package kv keeps the keys and values of sequences being decoded on the
// device (kv.New, kv.Cache, kv.DecodeStep: a decode step in one round
// trip). Package nn runs PyTorch's nn.MultiheadAttention (nn.NewMHA) and
// additive attention (nn.NewAdditive) on the device, forward and
// backward. Both build on the Device and Tensor of this package.
//
// # Inside your own Vulkan program
//
// A program that already drives Vulkan through vulkan-go runs vkattn on
// its own device (OpenOn), lets vkattn read and write its buffers in
// place (TensorOver) and records vkattn's work into its own command
// buffer (Record), so a whole decoder step is one submission and one wait:
//
//	dev, err := vkattn.OpenOn(vkattn.SharedDevice{
//		Instance: inst, PhysicalDevice: gpu, Device: device, // the host's vulkan-go handles
//		QueueFamily: family, QueueIndex: 0,                  // a compute queue vkattn may submit on
//	}, vkattn.Config{})
//	q, err := dev.TensorOver(vkattn.BufferRegion{Buffer: qBuf, Size: qSize,
//		Usage: qUsage, Shape: []int{1, 8, 1, 16}, Type: vkattn.Float32, Bound: 1e4}) // no copy
//	step, err := cache.PrepareStep(8, vkattn.Options{})  // a kv.Cache on dev
//	// between the host's vkBeginCommandBuffer and vkEndCommandBuffer, after its own dispatches:
//	err = step.Record(vkattn.CommandBuffer{Device: device, Buffer: cmd}, k, v, q, o)
//
// vkattn's commands begin and end with barriers, so the host's writes of
// Q, K and V are visible to them and their O to the host's next kernel;
// their parameters travel inside the command buffer. The host keeps the
// tensors open until its submission has finished, and closes its device
// after vkattn's Close. SEMANTICS.md §13 is the contract, and
// examples/decoder a Llama-style decoder run this way, a token per
// submission. Tensor.Buffer goes the other way: it says where a vkattn
// tensor lies, for the host's kernels to read (the viewer draws so).
//
// # Goroutines, cancellation and Close
//
// A Device is meant to be shared, like an *sql.DB: it and everything made
// on it (tensors, calls, caches, layers) are safe for concurrent use. Calls from
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
// # Round trips and memory
//
// Each queue submission and host wait is a round trip to the device, tens
// of microseconds on a discrete GPU. A prepared Call's Run is one; a KV
// cache's decode step (package kv) is one for the whole step (append,
// attention, O back).
// Device.Stats counts what the work costs beyond the kernels: memory
// allocations, descriptor pools and command buffers created, submissions,
// host waits and bytes staged between host and device (Stats.Since for a
// span). On lavapipe every buffer is host-visible; Config.Memory =
// DiscreteMemory (implied by Config.PlanAs) places buffers as a discrete
// GPU would, so every host read and write goes through the staging area
// and the counts are a GPU's. Config.MemoryLimit caps what vkattn
// allocates on each memory heap.
//
// # Errors and range
//
// Invalid input returns an error wrapping one of the sentinel errors,
// re-exported from package core (test with errors.Is); nothing panics on
// bad input. SEMANTICS.md §9.4 lists them and when each is returned, and
// §9 what the float32 kernels refuse to compute and how tensors carry
// their magnitude bounds.
//
// # The types
//
// Device, Tensor and Call are named types over those of the module's
// internal engine, which packages kv and nn build on too; every method a
// program can call is declared and documented here. Plans, Config and
// Stats are package core's, which documents their fields.
package vkattn
