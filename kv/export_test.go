package kv

import "github.com/vkattn/vkattn/internal/engine"

// CacheKeys is a contiguous cache's key storage, (B, HKV, Capacity, DK),
// as the kernels read it (q8_0 dequantized), once pending appends are
// done: for tests of what appends store.
func CacheKeys(c *Cache) ([]float32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settleLocked()
	return c.k.Download()
}

// CacheKeyBytes is a contiguous cache's key buffer as stored (q8_0 and
// q4_0: the quants, then the float16 scales), once pending appends are
// done: for tests of the bytes appends write.
func CacheKeyBytes(c *Cache) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settleLocked()
	k := engine.Root(c.k)
	raw := make([]byte, k.DType().StorageBytes(engine.Elements(k)))
	return raw, engine.Buf(k).Read(0, raw)
}
