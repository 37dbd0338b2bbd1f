package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vkattn/vkattn/core"
)

// Explain is the plan field by field, each with what it means, for a call
// with opts (run --explain): the problem and its FLOPs, the kernel and
// why, its tiles, workgroup and grid, the scale, the masks and what the
// call holds in memory. It ends in a newline.
func (p Plan) Explain(opts core.Options) string {
	var w strings.Builder
	k := p.Kernel
	d := p.Dims
	row := func(key, format string, args ...any) {
		fmt.Fprintf(&w, "  %-11s %s\n", key, fmt.Sprintf(format, args...))
	}
	w.WriteString("plan:\n")
	if k.Additive {
		row("problem", "%v (d_k is d_a, the width of the projections)", d)
		for _, l := range p.Projections {
			row("projection", "%v", l)
		}
	} else {
		row("problem", "%v, %.4g FLOPs (2*B*H*L*S*(d_k+d_v))", d, d.FLOPs())
	}
	if d.HKV != d.H {
		row("heads", "%d query heads share %d K/V heads (%d per group)", d.H, d.HKV, d.H/d.HKV)
	}
	row("device", "%s", p.Device)
	row("kernel", "%s", k.Variant)
	row("load path", "%s (%s)", k.LoadPath, k.Why)
	if k.DVMax != k.DMax {
		row("d_max", "%d (compile-time bound on d_k), %d on d_v", k.DMax, k.DVMax)
	} else {
		row("d_max", "%d (compile-time bound on d_k and d_v)", k.DMax)
	}
	if k.VFromK {
		row("values", "V is K's leading %d columns, read from K's rows (a view, no copy)", d.DV)
	}
	axes := "query row blocks x heads x batch"
	if k.Matrix > 0 {
		axes = "query row blocks x KV heads x batch"
		scaled := ""
		if slices.Contains(k.Types[:], core.BFloat16) {
			scaled = " (bfloat16 scaled by a power of two per block)"
		}
		row("matrices", "Q K^T and P V on %dx%dx%d cooperative matrices: float16 Q, K, V%s and P, float32 accumulators (SEMANTICS.md §18)", k.Matrix, k.Matrix, k.Matrix, scaled)
		row("tiles", "Br %d query rows (the query heads of a KV head packed) x Bc %d keys, tiles and output rows in %d B of shared memory", k.TileRows, k.KeyTile, k.SharedBytes)
		row("subgroups", "%d full subgroups of %d lanes (VK_EXT_subgroup_size_control, enabled)", k.WorkGroup/k.SubgroupSize, k.SubgroupSize)
	} else if k.TileRows > 0 {
		axes = "query row blocks x KV heads x batch"
		staged := "K and V tiles"
		if k.VFromK {
			staged = "K tiles (V read from their leading columns)"
		}
		row("tiles", "Br %d query rows (the query heads of a KV head packed) x Bc %d keys, %s in %d B of shared memory", k.TileRows, k.KeyTile, staged, k.SharedBytes)
		if k.DVMax == k.DMax {
			row("lanes", "%d lanes per row split d_max %d (%d values of q and of the output each), sums by subgroup shuffles; %d rows per lane group", k.LanesPerRow, k.DMax, k.DMax/k.LanesPerRow, k.RowsPerLane)
		} else {
			row("lanes", "%d lanes per row split q's d_max %d and the output's %d (%d and %d values each), sums by subgroup shuffles; %d rows per lane group", k.LanesPerRow, k.DMax, k.DVMax, k.DMax/k.LanesPerRow, k.DVMax/k.LanesPerRow, k.RowsPerLane)
		}
		row("subgroups", "full subgroups of %d lanes required (VK_EXT_subgroup_size_control, enabled)", k.SubgroupSize)
	} else {
		row("rows", "%d query rows per invocation", k.Rows)
		row("key tile", "%d keys per online-softmax step", k.KeyTile)
	}
	if k.Splits > 0 {
		axes = "key splits x KV heads*row blocks x batch"
		row("split-K", "%d splits of %d keys, %d row blocks per KV head, merged by attention_combine", k.Splits, k.SplitKeys, k.RowBlocks)
	}
	row("workgroup", "%d invocations", k.WorkGroup)
	row("grid", "%d x %d x %d workgroups (%s)", k.Grid[0], k.Grid[1], k.Grid[2], axes)
	if k.Additive {
		row("scores", "w_a . tanh(q W_q + b + k W_k), no scale")
	} else {
		note := map[bool]string{true: " (1/sqrt(d_k))", false: " (custom)"}[opts.Scale.IsDefault()]
		if k.VFromK && opts.Scale.IsDefault() {
			// Latent attention's d_k is the latent's width, not the
			// head width the model scales by.
			note = " (1/sqrt(d_k); latent attention models scale by their own: SEMANTICS.md §3)"
		}
		row("scale", "%.6g%s", opts.Scale.For(d.DK), note)
	}
	row("masks", "%s", opts.MaskSummary())
	memory := "no (B,H,L,S) buffer: memory grows with L*d"
	if opts.WantWeights {
		memory = fmt.Sprintf("weights requested: a (B,H,L,S) buffer of %s", core.FormatBytes(4*uint64(d.B)*uint64(d.H)*uint64(d.L)*uint64(d.S)))
	}
	row("memory", "%s", memory)
	return w.String()
}
