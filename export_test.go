package vkattn

import (
	"github.com/vkattn/vkattn/internal/engine"
	"github.com/vkattn/vkattn/pipelines"
)

// CacheKeys is a contiguous cache's key storage, (B, HKV, Capacity, DK),
// as the kernels read it (q8_0 dequantized), once pending appends are
// done: for tests of what appends store.
func CacheKeys(c *KVCache) ([]float32, error) { return engine.CacheKeys(c) }

// AttentionPlanOf is the planner's own plan behind k, for tests of what
// it chose.
func AttentionPlanOf(k KernelPlan) pipelines.AttentionPlan { return engine.AttentionPlanOf(k) }
