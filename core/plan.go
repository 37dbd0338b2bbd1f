package core

import (
	"fmt"
	"slices"
	"strings"
)

// Plan says what the device will run for a problem: which kernel variant,
// load path, tiles and grid. Nothing is chosen silently.
type Plan struct {
	Dims   Dims
	Device string
	Kernel KernelPlan
	// Projections are the dense layers that run first (additive attention's
	// q W_q + b and k W_k); none for scaled dot-product attention.
	Projections []LayerPlan
	// RoPE, if not nil, rotates Q and K first (rope.comp, into float32
	// copies the kernel reads); Q alone when RoPEQueryOnly (a KV cache's
	// keys are rotated as they are appended).
	RoPE          *RoPE
	RoPEQueryOnly bool
}

// MatrixErrorBound is how far a call so planned may move its outputs from
// float32 attention's, for its Q, K and V as stored and its score scale:
// zero but on cooperative matrices, where P is rounded to float16 and
// bfloat16 inputs are scaled into float16 (SEMANTICS.md §9.3).
func (p Plan) MatrixErrorBound(q, k, v []float32, scale Scale) MatrixBound {
	if p.Kernel.Matrix == 0 {
		return MatrixBound{}
	}
	return MatrixErrorBound(p.Dims.S, p.Dims.DK, scale.For(p.Dims.DK), p.Kernel.Types, q, k, v)
}

func (p Plan) String() string {
	kind := "attention"
	if p.Kernel.Additive {
		kind = "additive attention"
	}
	s := fmt.Sprintf("%s %v on %s: %v", kind, p.Dims, p.Device, p.Kernel)
	for _, l := range p.Projections {
		s += "; after " + l.String()
	}
	if r := p.RoPE; r != nil {
		what := "Q and K"
		if p.RoPEQueryOnly {
			what = "Q"
		}
		s += fmt.Sprintf("; after rotating %s (RoPE theta %g, %d dims, %v pairs, scaling %v)", what, r.Theta, r.RotatedDims(p.Dims.DK), r.Style, r.Scaling)
	}
	return s
}

// KernelPlan is the attention kernel the planner chose for a call: which
// SPIR-V variant, how it reads its inputs, and its layout (KernelLayout:
// bounds, rows, tiles, splits, chunks and launch grid, as the planner
// filled them). String says it in words, with why.
type KernelPlan struct {
	Variant  string   `json:"variant"`   // the SPIR-V variant, e.g. "attention_texel_vec4"
	LoadPath LoadPath `json:"load_path"` // how the kernel reads Q, K, V and masks
	Why      string   `json:"why"`       // why this load path and kernel
	Types    [3]DType `json:"types"`     // element types of Q, K and V as the kernel reads them
	// VFromK: V is K's leading columns (Tensor.Columns), read from K's
	// rows; the tiled kernels stage K's tiles alone.
	VFromK bool `json:"v_from_k,omitempty"`
	KernelLayout
	// Description is the planner's account of the kernel in words (String).
	Description string `json:"description"`
}

func (k KernelPlan) String() string { return k.Description }

// LinearKernelPlan is the dense-layer kernel (Y = X W^T + b) the planner
// chose for a layer: its variant, load path and layout (LinearLayout).
type LinearKernelPlan struct {
	Variant  string
	LoadPath LoadPath
	Why      string
	LinearLayout
	// Description is the planner's account of the kernel in words (String).
	Description string
}

func (k LinearKernelPlan) String() string { return k.Description }

// LayerPlan is one dense layer of an MHA plan.
type LayerPlan struct {
	Name                  string // "in_proj (Q,K,V fused)", "q_proj", "out_proj", ...
	Rows, Outputs, Inputs int
	Kernel                LinearKernelPlan
}

func (l LayerPlan) String() string {
	return fmt.Sprintf("%s: (%d x %d) x (%d x %d)^T: %v", l.Name, l.Rows, l.Inputs, l.Outputs, l.Inputs, l.Kernel)
}

// FLOPs counts a multiply-add as two operations.
func (l LayerPlan) FLOPs() float64 {
	return 2 * float64(l.Rows) * float64(l.Outputs) * float64(l.Inputs)
}

// Explain is the plan field by field, each with what it means, for a call
// with opts (run --explain): the problem and its FLOPs, the kernel and
// why, its tiles, workgroup and grid, the scale, the masks and what the
// call holds in memory. It ends in a newline.
func (p Plan) Explain(opts Options) string {
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
		if slices.Contains(k.Types[:], BFloat16) {
			scaled = " (bfloat16 scaled by a power of two per block)"
		}
		row("matrices", "Q K^T and P V on %dx%dx%d cooperative matrices: float16 Q, K, V%s and P, float32 accumulators (SEMANTICS.md §9.3)", k.Matrix, k.Matrix, k.Matrix, scaled)
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
		memory = fmt.Sprintf("weights requested: a (B,H,L,S) buffer of %s", FormatBytes(4*uint64(d.B)*uint64(d.H)*uint64(d.L)*uint64(d.S)))
	}
	row("memory", "%s", memory)
	return w.String()
}
