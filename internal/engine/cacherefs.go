package engine

import "github.com/vkattn/vkattn/core"

// CacheRefs are what a KV cache (package kv) adds to a call over it: the
// device copy of the lengths the kernels read, which the cache keeps
// current between replays, its page table when paged, and its RoPE.
type CacheRefs struct {
	// Lengths are int32 words: the key lengths [B], then the query
	// lengths [B].
	Lengths *Tensor
	// PageTable, if not nil, is the int32 (B, PerItem) table of a paged
	// cache's pages of PageSize positions in a pool of Pages.
	PageTable                *Tensor
	PageSize, Pages, PerItem int
	// RoPE, if not nil, rotates the queries of a call over the cache (its
	// keys were rotated as they were appended) by the rows of RoPETable:
	// query t of N of batch item b by row t + RoPELengths[b] - N.
	RoPE                   *core.RoPE
	RoPETable, RoPELengths *Tensor
}
