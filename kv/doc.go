// Package kv is vkattn's KV cache: the keys and values of B sequences
// kept on a device for decoding, appended a token (or a prompt) at a
// time, and attended over by the queries of the newest tokens.
//
//	dev, err := vkattn.Open(vkattn.Config{})
//	cache, err := kv.New(dev, kv.Config{B: 1, HKV: 8, Capacity: 4096, DK: 128, DV: 128,
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
// capacity. Cache.AppendTo appends to one sequence, Truncate rolls back,
// Cache.Prepare records a call over the cache (a vkattn.Call), and in a
// paged cache Fork starts a continuation that shares its source's pages
// (copy on write; PagesInUse counts them). A rolling cache
// (Config.Window) keeps only what a sliding window sees, and a latent
// cache (Config.Latent) stores multi-head latent attention's rows alone,
// V their leading columns:
//
//	cache, err := kv.New(dev, kv.Config{B: 1, HKV: 1, Capacity: 4096, DK: 576, DV: 512,
//		DType: vkattn.Q8_0, PageSize: 64, Latent: true})
//	err = cache.Append(latents, nil, n)             // (B, 1, n, 576), rotary columns already rotated
//	opts := vkattn.Options{Scale: vkattn.CustomScale(scale)} // the model's, not 1/sqrt(576)
//	step, err := cache.PrepareStep(128, opts)
//	_, err = step.Run(ctx, latent, nil, qTok, o)    // o: (B, 128, 1, 512)
//
// A server that batches many users runs a ragged step: each sequence
// brings its own number of new tokens (a prompt chunk, one decoded
// token, or none), packed as the varlen API packs them, and one step
// appends and attends them all in one submission:
//
//	step, err := cache.PrepareRagged(kv.RaggedConfig{Heads: 32, Tokens: 1024, Chunks: 4, Options: opts})
//	_, err = step.Run(ctx, counts, k, v, q, o) // counts[b] new tokens; k (1, H_kv, total, d), q and o (1, 32, total, d)
//
// SEMANTICS.md §4.2 defines all of it, §4.3 the ragged step, §2 the latent shapes, §5 the
// cache's RoPE, §9.2 its q8_0 and q4_0 storage and §4.4 the rolling cache.
//
// A cache is safe for concurrent use, and its device's Close frees it
// with everything else made on the device. Errors wrap the sentinel
// errors of package vkattn (ErrCapacity past a sequence's capacity,
// ErrClosed after Close, ...).
package kv
