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
// Tensor.SwapAxes12. Options holds the masks (Mask, BoolMasks, Causal,
// KeyLengths, QueryLengths: SEMANTICS.md §4), the score variants (Window,
// Softcap, ALiBi, Sinks: §4.1), rotary embeddings (RoPE: §17) and the
// extra outputs (WantLSE, WantWeights: §6). Device.Plan says which kernel
// variant, load path, tiles and grid a problem gets, without running it;
// Plan.Explain says it in words.
//
// A call repeated with new data is prepared once: Device.Prepare allocates
// the outputs and records the dispatch, then Tensor.Write and Call.Run
// replay it with no allocation (Call.Output, Call.Close). A one-shot
// Attention on shapes seen before allocates nothing either: the buffers,
// descriptor sets and command buffers a call frees are kept (buffers up
// to 4 MiB, 64 MiB in all) for the next call and freed by Device.Close.
//
// # Element types
//
// Q, K and V may each be float32, float16 or bfloat16, and K and V q8_0:
// Device.UploadAs rounds float32 data to the type, Device.UploadBits
// stores bit patterns already held, Device.PlanAs plans for given types.
// The kernels widen on load and compute in float32 (SEMANTICS.md §8.1,
// §8.2; §18 for the cooperative matrices that half inputs use where the
// device has them, and Options.Float32Products to keep them off).
//
// # Decoding: the KV cache
//
//	cache, err := dev.NewKVCache(vkattn.KVCacheConfig{B: 1, HKV: 8, Capacity: 4096, DK: 128, DV: 128,
//		DType: vkattn.Float16, PageSize: 256}) // PageSize 0: contiguous
//	err = cache.Append(kPrompt, vPrompt, n)     // (B, H_kv, n, d): the prompt's K and V
//	out, err := cache.Attention(qPrompt, opts)  // the prompt's n queries, causal per sequence
//	step, err := cache.PrepareStep(32, opts)    // one decode step of 32 query heads, prepared once
//	o := make([]float32, 1*32*1*128)
//	for ... {
//		_, err = step.Run(ctx, kTok, vTok, qTok, o) // append the token, attend, O into o
//	}
//
// The cache keeps each sequence's keys and values on the device and
// appends only the new positions. A decode step is one queue submission
// and one host wait whatever B and H_kv: the token's K, V and Q, the
// lengths and the page table travel in the submission that attends, and
// O comes back in it. Its work follows the sequences' length, not the
// capacity. KVCache.AppendTo appends to one sequence, Truncate rolls
// back, KVCache.Prepare records a call over the cache, and in a paged
// cache Fork starts a continuation that shares its source's pages (copy
// on write; PagesInUse counts them). Device.AttentionVarlen takes packed
// sequences without padding. SEMANTICS.md §4.2 defines all of it, §17 the
// cache's RoPE and §8.2 its q8_0 storage.
//
// # Training: the backward pass
//
//	g, err := dev.AttentionBackward(q, k, v, dO, opts) // dQ, dK, dV (and dSinks) of sum(O * dO)
//	dq, err := g.DQ.Download()
//
// The probabilities are recomputed from the forward's log-sum-exp (nothing
// L x S is stored), every mask, length and score variant applies, and the
// sums run in a fixed order, so the gradients are the same bits run to run
// (SEMANTICS.md §16). MHA.Backward and Additive.Backward give a layer's
// gradients, its inputs' and every parameter's by name.
//
// # Layers: multi-head and additive attention
//
// A PyTorch nn.MultiheadAttention layer (batch first, eval mode) runs as
// one submission: the input projections, every head's attention read
// through strides out of the projection output, the output projection,
// and the head-averaged weights when asked (SEMANTICS.md §9):
//
//	w, err := weights.LoadMHA("layer.safetensors", d, 0, 0) // or .npz; kdim, vdim 0 = d
//	layer, err := nn.NewMHA(dev, w)                              // uploads the weights once
//	defer layer.Close()
//	x, err := dev.Upload([]int{B, T, d}, xData)              // (B,T,d) batch first, or (T,d)
//	out, err := layer.Forward(x, nil, nil, nn.MHAOptions{ // key, value nil: self-attention
//		Heads:       8,
//		KeyPadding:  &nn.KeyPadding{Padded: padded},     // (B,S), PyTorch's key_padding_mask
//		Attention:   vkattn.Options{Causal: vkattn.CausalTopLeft},
//		NeedWeights: true,                                   // out.Weights (B,h,T,S), out.AvgWeights (B,T,S)
//	})
//	y, err := out.Out.Download()                             // (B,T,d)
//
// Cross-attention passes key and value tensors; MHA.Prepare records the
// layer for replays and MHA.Plan says what runs. Additive (Bahdanau)
// attention projects queries and keys once and scores the projections in
// the attention kernel, so masks and outputs mean what they mean for
// Attention (SEMANTICS.md §10):
//
//	w, err := weights.LoadAdditive("additive.npz", dq, dk) // W_q (dq,da), W_k (dk,da), b, w_a
//	add, err := nn.NewAdditive(dev, w)
//	out, err := add.Attention(q, k, v, vkattn.Options{KeyLengths: lens})
//
// # A host program's device
//
// A program that already drives Vulkan through vulkan-go can run vkattn on
// its own device and read the results where they are:
//
//	dev, err := vkattn.OpenOn(vkattn.SharedDevice{
//		Instance: inst, PhysicalDevice: gpu, Device: device, // the host's vulkan-go handles
//		QueueFamily: family, QueueIndex: 0,                  // a compute queue vkattn submits on
//		SubgroupSizeControl: true, FullSubgroups: true,      // what the host enabled, if it did
//	}, vkattn.Config{})
//	out, err := dev.Attention(q, k, v, vkattn.Options{WantWeights: true})
//	buf, err := out.Weights.Buffer() // buf.Handle is the VkBuffer; Offset, Strides, Bytes say where
//	dev.Close()                      // frees what vkattn made; the device stays the host's
//
// The host does not submit to that queue while a vkattn call runs
// (Vulkan's rule for one queue) and closes its device after vkattn's
// Close (SEMANTICS.md §19). The viewer (vkattn view) draws this way.
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
// # Round trips and memory
//
// Each queue submission and host wait is a round trip to the device, tens
// of microseconds on a discrete GPU. A prepared Call's Run is one; a
// KVCache's DecodeStep.Run is one for the whole step (append, attention,
// O back); Append and AppendTensors are one whatever B and HKV.
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
// bad input. SEMANTICS.md §8.3 lists them and when each is returned, and
// §8 what the float32 kernels refuse to compute and how tensors carry
// their magnitude bounds.
package vkattn
