package pipelines

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vkattn/vkattn/core"
)

// A plan in words: what the kernel is, how it reads its inputs and masks,
// and how it is split (AttentionPlan.String, which Plan's Description and
// --explain show).

func (p AttentionPlan) String() string {
	loads := "scalar loads"
	if p.Vec4 {
		loads = "vec4 loads"
	}
	if p.Halves8 {
		loads += ", halves eight a fetch"
	}
	if p.QuantBlocks {
		loads += ", quantized K/V a block at a time"
	}
	if p.MaskVec4 || p.BoolMaskVec4 {
		loads += ", masks four keys a fetch"
	}
	if p.Variant.Family == FamilyCoopmat {
		return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), both products on %dx%dx%d cooperative matrices (float16 in, float32 accumulated; P rounded to float16), workgroup-tiled, query heads of each KV head packed; Br %d query rows x Bc %d keys per tile, workgroup %d (%d subgroups of %d, full subgroups required), %d B of shared memory; grid %dx%dx%d (row blocks x KV heads x batch), online softmax rescaled once per tile, no L*S buffer%s%s",
			p.Variant, p.Path, p.Why, loads, p.matrixTypesNote(), p.Matrix, p.Matrix, p.Matrix, p.TileRows, p.KeyTile, p.WorkGroup, p.WorkGroup/p.SubgroupSize, p.SubgroupSize,
			p.SharedBytes, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
	}
	if p.Variant.Family == FamilyTiled {
		holds := fmt.Sprintf("each holds %d of the d_max %d", p.DMax/p.LanesPerRow, p.DMax)
		if p.DVMax != p.DMax {
			holds = fmt.Sprintf("each holds %d of q's d_max %d and %d of the output's %d", p.DMax/p.LanesPerRow, p.DMax, p.DVMax/p.LanesPerRow, p.DVMax)
		}
		staged := "K/V tiles"
		if p.Shape.VFromK {
			staged = "K tiles (V read from them: V is K's leading columns)"
		}
		tiles := fmt.Sprintf("Br %d query rows x Bc %d keys per tile, %d lanes per row (%s) and %d rows per lane group, workgroup %d, %s %d B of shared memory, full subgroups of %d required (VK_EXT_subgroup_size_control enabled)",
			p.TileRows, p.KeyTile, p.LanesPerRow, holds, p.RowsPerLane, p.WorkGroup, staged, p.SharedBytes, p.SubgroupSize)
		if p.Splits > 0 {
			return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), split-K: %d splits of %d keys, a workgroup each, query heads of each KV head packed (%d row blocks); %s; grid %dx%dx%d (key splits x KV heads*row blocks x batch), then attention_combine; online softmax, no L*S buffer%s%s",
				p.Variant, p.Path, p.Why, loads, p.typesNote(), p.Splits, p.SplitKeys, p.RowBlocks, tiles, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
		}
		return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), workgroup-tiled, query heads of each KV head packed; %s; grid %dx%dx%d (row blocks x KV heads x batch), online softmax rescaled once per tile, no L*S buffer%s%s",
			p.Variant, p.Path, p.Why, loads, p.typesNote(), tiles, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
	}
	// The row kernels use no subgroup operations but the shared loads' shuffles.
	anyWidth := ", no subgroup operations (any subgroup width)"
	if p.Splits > 0 {
		return fmt.Sprintf("kernel %s (load path %s: %s; %s%s), split-K: %d splits of %d keys, one per lane, query heads of each KV head packed (%d row blocks of %d rows), %d keys per step, d_max %d, workgroup %d%s, grid %dx%dx%d (split blocks x KV heads*row blocks x batch), then attention_combine; online softmax, no L*S buffer%s%s",
			p.Variant, p.Path, p.Why, loads, p.typesNote(), p.Splits, p.SplitKeys, p.RowBlocks, p.Rows, p.KeyTile, p.DMax, p.WorkGroup, anyWidth, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
	}
	shared := anyWidth
	if p.SharedLoads > 0 {
		shared = fmt.Sprintf(", K/V rows fetched once per %d-lane subgroup and shared by shuffles (the device's one subgroup width)", p.SharedLoads)
	}
	return fmt.Sprintf("kernel %s (load path %s: %s; %s%s%s), d_max %d, %d query rows/invocation, %d keys per step, workgroup %d, grid %dx%dx%d (row blocks x heads x batch), online softmax, no L*S buffer%s%s",
		p.Variant, p.Path, p.Why, loads, p.typesNote(), shared, p.DMax, p.Rows, p.KeyTile, p.WorkGroup, p.Grid[0], p.Grid[1], p.Grid[2], p.maskNote(), p.chunkNote())
}

// typesNote says how Q, K and V are read when one of them is a half.
func (p AttentionPlan) typesNote() string {
	return typesNote([]string{"Q", "K", "V"}, p.Shape.Q.Type, p.Shape.K.Type, p.Shape.V.Type)
}

// matrixTypesNote names Q's, K's and V's types as the matrices read them:
// float16 as stored, bfloat16 scaled into float16 by a power of two per
// block (SEMANTICS.md §9.3).
func (p AttentionPlan) matrixTypesNote() string {
	ts := []core.DType{p.Shape.Q.Type, p.Shape.K.Type, p.Shape.V.Type}
	note := "; " + namedTypes([]string{"Q", "K", "V"}, ts...) + " as float16"
	if slices.Contains(ts, core.BFloat16) {
		note += " (bfloat16 scaled by a power of two per block)"
	}
	return note
}

// maskNote says whether mask loads and score variants are compiled in.
func (p AttentionPlan) maskNote() string {
	note := "; no mask loads (none given)"
	if p.Masked {
		note = "; mask loads compiled in"
	}
	vs := p.Shape.Variants.names()
	if len(vs) > 0 {
		note += "; " + strings.Join(vs, ", ") + " compiled in"
	}
	return note
}

// chunkNote describes the split of a call larger than one binding.
func (p AttentionPlan) chunkNote() string {
	if p.Chunks <= 1 {
		return ""
	}
	return fmt.Sprintf("; tensors exceed one binding's reach: %d chunks of one batch item, %d KV heads and up to %d query rows, each through buffer windows, one submission", p.Chunks, p.ChunkKVHeads, p.ChunkRows)
}
