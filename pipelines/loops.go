package pipelines

import (
	"math/bits"

	"github.com/vkattn/vkattn/core"
)

// Loop counts: how many loop iterations one invocation of each kernel runs,
// all its loops together, for devices that end an invocation's loops past
// a budget (core.DeviceInfo.LoopBudget: lavapipe before Mesa 26). Each is
// an upper bound of what the driver counts: loops whose trip count the
// shader compiler knows are unrolled there (the row kernels' inner loops
// are), the others each count once per iteration (the boundaries that
// confirm each bound: BENCHMARKS.md "Loop budget"). The
// planner splits a call's keys where that keeps every invocation within
// the budget, and refuses it (a LimitError) where it cannot.

// rowLoops bounds an invocation of the row kernels (attention.comp) over
// keys keys: one iteration per step of KeyTile keys, and the weights
// pass's one per key and one more.
func rowLoops(p *AttentionPlan, keys int, weights bool) int {
	n := ceilDiv(keys, p.KeyTile)
	if weights {
		n += p.Shape.S + 1
	}
	return n
}

// tiledTileLoops bounds a workgroup's iterations per tile of the tiled
// kernels (attention_tiled.comp): the tile loop, the staging loop's share
// of the tile, and per key the score and value loops and, per row of a
// lane, its max, exponent and accumulation steps and the log2(lanes per
// row) shuffles of its dot product. Measured on Mesa 22.3.6 (the largest
// key count that ran whole, at L = 64 and d = 4, 64 and 128 under three
// vendors' tiles) every shape looped 5-50% less than this.
func tiledTileLoops(p *AttentionPlan) int {
	d4 := p.DMax / 4
	shuffles := bits.Len(uint(p.LanesPerRow)) - 1
	return 1 + ceilDiv(p.KeyTile*d4, p.WorkGroup) + p.KeyTile*(2+p.RowsPerLane*(3+shuffles))
}

// tiledLoops bounds a tiled workgroup's iterations over keys keys, with
// the weights pass (as many tiles over every key) where asked.
func tiledLoops(p *AttentionPlan, keys int, weights bool) int {
	n := ceilDiv(keys, p.KeyTile)
	if weights {
		n += ceilDiv(p.Shape.S, p.KeyTile)
	}
	return n * tiledTileLoops(p)
}

// combineLoops bounds an invocation of the split-K combine pass
// (attention_combine.comp, 64 lanes): its two passes over the splits, the
// two reductions and, per output element it writes, a pass over the
// splits.
func combineLoops(splits, dv int) int {
	const lanes = 64
	return 2*ceilDiv(splits, lanes) + 2*6 + ceilDiv(dv, lanes)*(splits+1)
}

// backwardLoops bounds an invocation of the backward passes
// (attention_backward.comp): per tile of staged rows the tile loop, the
// loop over its rows and one more; the query pass walks the keys, the
// key pass the query rows of each head of its group.
func backwardLoops(tile, keys, rows, group int) int {
	perTile := func(n int) int { return ceilDiv(n, tile) * (tile + 2) }
	return max(perTile(keys), group*(perTile(rows)+1))
}

// backwardRowLoops bounds an invocation of the backward's row kernels
// (attention_backward_rows.comp), whose loops over the head dimension and
// a step's rows are unrolled: one iteration per step of step rows, over
// the keys (the query pass) or over the query rows of each head of the
// group, in one loop (the key pass).
func backwardRowLoops(step, keys, rows, group int) int {
	return max(ceilDiv(keys, step), group*ceilDiv(rows, step))
}

// linearLoops bounds an invocation of the dense layers (linear.comp): one
// iteration per four inputs. (The cooperative-matrix layers run only where
// there is no budget.)
func linearLoops(inputs int) int { return ceilDiv(inputs, 4) }

// fitLoops keeps the attention plan p within the device's loop budget: a
// plan whose invocations would loop more runs its keys as split-K
// (several invocations a row, merged by the combine pass) where its family
// has a split-K variant, else it is a LimitError naming the budget.
func fitLoops(dev core.DeviceInfo, in *PlanInput, p *AttentionPlan) error {
	budget := dev.LoopBudget()
	if budget == 0 {
		return nil
	}
	s := &p.Shape
	loops := func(keys int) int {
		if p.Variant.Family == FamilyTiled {
			return tiledLoops(p, keys, in.Weights)
		}
		return rowLoops(p, keys, in.Weights)
	}
	step := p.KeyTile // keys a loop iteration takes
	if p.Splits > 0 {
		if loops(p.SplitKeys) <= budget && combineLoops(p.Splits, s.DV) <= budget {
			return nil
		}
	} else if loops(s.S) <= budget {
		return nil
	}
	canSplit := p.Vec4 && !in.Weights && !p.Additive && (p.Variant.Family == FamilyAttention || p.Variant.Family == FamilyTiled)
	if !canSplit {
		return Limitf("on %s, which ends an invocation's loops after %d iterations, %s over %d keys would loop %d times; it has no split-K form (%s)",
			dev.Name, budget, p.Variant, s.S, loops(s.S), splitBlocker(in, p))
	}
	// The most keys an invocation may take, in whole steps.
	most := 0
	for most+step <= s.S && loops(most+step) <= budget {
		most += step
	}
	if most == 0 {
		return Limitf("on %s, which ends an invocation's loops after %d iterations, %s cannot take one step of %d keys", dev.Name, budget, p.Variant, step)
	}
	splits := ceilDiv(s.S, most)
	if p.Variant.Family == FamilyAttention {
		// A lane a split: fill the workgroup's lanes.
		splits = max(splits, p.WorkGroup)
	}
	p.SplitKeys = ceilDiv(ceilDiv(s.S, splits), step) * step
	if n := combineLoops(ceilDiv(s.S, p.SplitKeys), s.DV); n > budget {
		return Limitf("on %s, which ends an invocation's loops after %d iterations, %d keys need %d key splits, whose merge would loop %d times",
			dev.Name, budget, s.S, ceilDiv(s.S, p.SplitKeys), n)
	}
	p.splitKeys(ceilDiv(s.S, p.SplitKeys))
	p.Why += "; keys split to stay within the driver's loop limit"
	return nil
}

// splitBlocker says why plan p has no split-K form.
func splitBlocker(in *PlanInput, p *AttentionPlan) string {
	switch {
	case in.Weights:
		return "the weights are asked for"
	case p.Additive:
		return "additive scores"
	case !p.Vec4:
		return "rows not read as vec4s: widths, offsets or strides not multiples of 4"
	}
	return "the " + p.Variant.Family.String() + " kernels"
}
