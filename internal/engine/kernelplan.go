package engine

import (
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
)

// KernelPlan is the attention kernel the planner chose for a call: which
// SPIR-V variant, how it reads its inputs, its tiles and launch grid, and
// how a call larger than one binding reaches is split. String says it in
// words, with why.
type KernelPlan struct {
	Variant  string        `json:"variant"`   // the SPIR-V variant, e.g. "attention_texel_vec4"
	LoadPath core.LoadPath `json:"load_path"` // how the kernel reads Q, K, V and masks
	Why      string        `json:"why"`       // why this load path and kernel
	DMax     int           `json:"d_max"`     // compile-time bound of d_k and d_v
	// DVMax is the tiled kernels' bound of d_v: DMax, or for heads wider
	// than MaxRowWidth d_v's own (512 for multi-head latent attention).
	DVMax int `json:"dv_max"`
	// VFromK: V is K's leading columns (Tensor.Columns), read from K's
	// rows; the tiled kernels stage K's tiles alone.
	VFromK bool          `json:"v_from_k,omitempty"`
	Types  [3]core.DType `json:"types"` // element types of Q, K and V as the kernel reads them
	// The row kernels: query rows per invocation and keys per
	// online-softmax step; the invocations per workgroup and workgroups of
	// the (first) dispatch.
	Rows      int       `json:"rows"`
	KeyTile   int       `json:"key_tile"`
	WorkGroup int       `json:"workgroup"`
	Grid      [3]uint32 `json:"grid"`
	// The tiled GPU kernels: query rows per workgroup (Br), lanes per row,
	// rows per lane group, bytes of shared memory and the subgroup size
	// they require.
	TileRows     int `json:"tile_rows,omitempty"`
	LanesPerRow  int `json:"lanes_per_row,omitempty"`
	RowsPerLane  int `json:"rows_per_lane,omitempty"`
	SharedBytes  int `json:"shared_bytes,omitempty"`
	SubgroupSize int `json:"subgroup_size,omitempty"`
	// Matrix > 0: the cooperative-matrix kernel, both products on Matrix x
	// Matrix x Matrix float16 matrices with float32 accumulators
	// (SEMANTICS.md §18).
	Matrix int `json:"matrix,omitempty"`
	// Split-K decode (Splits > 0): the keys in Splits blocks of SplitKeys,
	// the query heads of a KV head packed in RowBlocks blocks; a combine
	// pass merges the blocks.
	Splits    int  `json:"splits,omitempty"`
	SplitKeys int  `json:"split_keys,omitempty"`
	RowBlocks int  `json:"row_blocks,omitempty"`
	Vec4      bool `json:"vec4,omitempty"`     // four values a load
	Additive  bool `json:"additive,omitempty"` // additive (Bahdanau) scores; Q and K are the projections
	Masked    bool `json:"masked,omitempty"`   // built with the mask loads (the call has a mask)
	// SharedLoads > 0: the subgroup lanes (this many) that share each K/V
	// row one of them fetches.
	SharedLoads int `json:"shared_loads,omitempty"`
	// Chunks > 1: the call runs as Chunks parts of ChunkKVHeads KV heads
	// with ChunkHeads query heads of one batch item and up to ChunkRows
	// query rows.
	Chunks       int `json:"chunks,omitempty"`
	ChunkKVHeads int `json:"chunk_kv_heads,omitempty"`
	ChunkHeads   int `json:"chunk_heads,omitempty"`
	ChunkRows    int `json:"chunk_rows,omitempty"`
	plan         pipelines.AttentionPlan
}

// kernelPlan describes the planner's choice p.
func kernelPlan(p pipelines.AttentionPlan) KernelPlan {
	return KernelPlan{
		Variant: p.Variant.Name(), LoadPath: p.Path, Vec4: p.Vec4, Additive: p.Additive, Masked: p.Masked, DMax: p.DMax, DVMax: p.DVMax, VFromK: p.Shape.VFromK,
		Types: [3]core.DType{p.Shape.Q.Type, p.Shape.K.Type, p.Shape.V.Type},
		Rows:  p.Rows, KeyTile: p.KeyTile, WorkGroup: p.WorkGroup, SharedLoads: p.SharedLoads,
		Splits: p.Splits, SplitKeys: p.SplitKeys, RowBlocks: p.RowBlocks,
		TileRows: p.TileRows, LanesPerRow: p.LanesPerRow, RowsPerLane: p.RowsPerLane, SharedBytes: p.SharedBytes, SubgroupSize: p.SubgroupSize,
		Matrix: p.Matrix, Chunks: p.Chunks, ChunkKVHeads: p.ChunkKVHeads, ChunkHeads: p.ChunkHeads, ChunkRows: p.ChunkRows,
		Grid: p.Grid, Why: p.Why, plan: p,
	}
}

func (k KernelPlan) String() string { return k.plan.String() }

// LinearKernelPlan is the dense-layer kernel (Y = X W^T + b) the planner
// chose for a layer: its variant, load path, the block of rows and
// outputs each invocation computes, workgroup and grid.
type LinearKernelPlan struct {
	Variant            string
	LoadPath           core.LoadPath
	Vec4               bool
	TileRows, TileCols int // rows of X and outputs per invocation (per workgroup on matrices)
	WorkGroup          int
	Grid               [3]uint32
	X, W               core.DType // element types of the input and the weights
	// Matrix > 0: the products on Matrix x Matrix x Matrix float16
	// cooperative matrices (SEMANTICS.md §18).
	Matrix int
	// BlockRows x BlockOutputs is the block of Y one dispatch computes:
	// the whole layer, or Blocks of them where X, W or Y is larger than one
	// binding reaches.
	BlockRows, BlockOutputs, Blocks int
	Why                             string
	plan                            pipelines.LinearPlan
}

// linearKernelPlan describes the planner's choice p.
func linearKernelPlan(p pipelines.LinearPlan) LinearKernelPlan {
	return LinearKernelPlan{Variant: p.Variant.Name(), LoadPath: p.Path, Vec4: p.Vec4, TileRows: p.TileRows, TileCols: p.TileCols,
		WorkGroup: p.WorkGroup, Grid: p.Grid, X: p.X, W: p.W, Matrix: p.Matrix,
		BlockRows: p.BlockRows, BlockOutputs: p.BlockOutputs, Blocks: p.Blocks, Why: p.Why, plan: p}
}

func (k LinearKernelPlan) String() string { return k.plan.String() }

// AttentionPlanOf is the planner's own plan behind k, for tests of what
// it chose.
func AttentionPlanOf(k KernelPlan) pipelines.AttentionPlan { return k.plan }
