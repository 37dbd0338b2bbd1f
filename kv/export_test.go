package kv

// CacheKeys is a contiguous cache's key storage, (B, HKV, Capacity, DK),
// as the kernels read it (q8_0 dequantized), once pending appends are
// done: for tests of what appends store.
func CacheKeys(c *Cache) ([]float32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settleLocked()
	return c.k.Download()
}
