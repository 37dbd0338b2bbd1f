package core

// KernelLayout is how a planned attention kernel is laid out: its width
// bounds, the rows and keys each invocation or workgroup takes, the split
// of the keys for decode, the split of a call larger than one binding
// reaches, and the launch grid. The planner fills it (pipelines'
// AttentionPlan embeds it) and the public plan shows it as it is.
type KernelLayout struct {
	DMax int `json:"d_max"` // compile-time bound of d_k and d_v
	// DVMax is the tiled kernels' bound of d_v: DMax, or for heads wider
	// than MaxRowWidth d_v's own (512 for multi-head latent attention).
	DVMax int `json:"dv_max"`
	// The row kernels: query rows per invocation and keys per
	// online-softmax step (the shader's KEYS; Bc for the tiled kernels);
	// the invocations per workgroup and workgroups of the (first)
	// dispatch.
	Rows      int       `json:"rows"`
	KeyTile   int       `json:"key_tile"`
	WorkGroup int       `json:"workgroup"`
	Grid      [3]uint32 `json:"grid"`
	// The tiled GPU kernels (and the cooperative-matrix one): a workgroup
	// owns TileRows query rows (Br) of one KV head's query heads and walks
	// KeyTile keys per tile staged in SharedBytes of shared memory;
	// LanesPerRow lanes split each row's head dimension, RowsPerLane rows
	// each group of them holds; the pipeline requires full subgroups of
	// SubgroupSize lanes.
	TileRows     int `json:"tile_rows,omitempty"`
	LanesPerRow  int `json:"lanes_per_row,omitempty"`
	RowsPerLane  int `json:"rows_per_lane,omitempty"`
	SharedBytes  int `json:"shared_bytes,omitempty"`
	SubgroupSize int `json:"subgroup_size,omitempty"`
	// Matrix > 0: the cooperative-matrix kernel, both products on Matrix x
	// Matrix x Matrix float16 matrices with float32 accumulators
	// (SEMANTICS.md §9.3).
	Matrix int `json:"matrix,omitempty"`
	// Split-K decode (Splits > 0, flash-decoding): the keys in Splits
	// blocks of SplitKeys, the query heads of a KV head packed in RowBlocks
	// blocks; a combine pass merges the blocks.
	Splits    int  `json:"splits,omitempty"`
	SplitKeys int  `json:"split_keys,omitempty"`
	RowBlocks int  `json:"row_blocks,omitempty"`
	Vec4      bool `json:"vec4,omitempty"` // Q, K and V read four values a load
	// Halves8: the row kernels read float16 and bfloat16 inputs through
	// 32-bit-word texel views, eight halves (two vec4 slots) a fetch
	// instead of four; their widths, offsets and strides are multiples of 8.
	Halves8 bool `json:"halves8,omitempty"`
	// QuantBlocks: the row kernels read q8_0 and q4_0 K and V by whole
	// blocks of 32, each texel of quants and each block's scale fetched
	// once (not once per four values); their widths, offsets and strides
	// are multiples of 32.
	QuantBlocks bool `json:"quant_blocks,omitempty"`
	// MaskVec4, BoolMaskVec4: the row kernels read the additive mask, the
	// (folded) boolean masks, four keys a fetch (through a four-float
	// texel view): prefill steps of four keys over a mask whose keys are
	// contiguous and whose rows start on multiples of 4.
	MaskVec4     bool `json:"mask_vec4,omitempty"`
	BoolMaskVec4 bool `json:"bool_mask_vec4,omitempty"`
	Additive     bool `json:"additive,omitempty"` // additive (Bahdanau) scores; Q and K are the projections
	// Masked: the call has an additive, boolean or key-padding mask; the
	// kernel is specialized with the loads of those it has.
	Masked bool `json:"masked,omitempty"`
	// SharedLoads > 0: the subgroup lanes (this many) that share each K/V
	// row one of them fetches (subgroup shuffles).
	SharedLoads int `json:"shared_loads,omitempty"`
	// Chunks > 1: the call is larger than one binding reaches and runs as
	// Chunks parts of ChunkKVHeads KV heads with ChunkHeads query heads of
	// one batch item and up to ChunkRows query rows.
	Chunks       int `json:"chunks,omitempty"`
	ChunkKVHeads int `json:"chunk_kv_heads,omitempty"`
	ChunkHeads   int `json:"chunk_heads,omitempty"`
	ChunkRows    int `json:"chunk_rows,omitempty"`
}

// LinearLayout is how a planned dense-layer kernel (Y = X W^T + b) is laid
// out: the block of Y each invocation (or workgroup, on matrices) computes,
// the launch, the element types, and the split of a layer larger than one
// binding reaches. pipelines' LinearPlan embeds it; the public plan shows
// it as it is.
type LinearLayout struct {
	Vec4               bool
	TileRows, TileCols int // rows of X and outputs per invocation (per workgroup on matrices; fixed by the shader)
	WorkGroup          int
	Grid               [3]uint32
	X, W               DType // element types of the input and the weights
	// Matrix > 0: the products on Matrix x Matrix x Matrix float16
	// cooperative matrices (SEMANTICS.md §9.3), in workgroups of full
	// subgroups of SubgroupSize lanes.
	Matrix, SubgroupSize int
	// BlockRows x BlockOutputs is the block of Y one dispatch computes,
	// bound through its own buffer windows: the whole layer when it fits
	// one binding, Blocks of them when not.
	BlockRows, BlockOutputs, Blocks int
}
