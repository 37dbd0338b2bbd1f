package pipelines

import (
	"reflect"
	"strings"

	"github.com/vkattn/vkattn/core"
)

// Specialization constants: one ID per meaning, the same in every kernel
// family that has it. A GLSL constant NAME (NAME_SPEC where a macro takes
// NAME) is declared `layout(constant_id = SPEC_NAME) const ... NAME`;
// interface.glsl defines the SPEC_* IDs from specIDs. ID 0 is every
// kernel's workgroup size (`layout(local_size_x_id = 0) in`).
//
// Each family has a struct of its constants whose fields are tagged with
// the GLSL constant's name; its constants method is the list the pipeline
// is created with. TestSpecConstantsByName holds each struct to its
// GLSL source (by name and ID) and to each SPIR-V variant's SpecIds.
var specIDs = []glslName{
	{"SPEC_D4", 1, "compile-time bound of d_k and d_v, in vec4s"},
	{"SPEC_DV4", 2, "compile-time bound of d_v, in vec4s (at most D4)"},
	{"SPEC_ROWS", 3, "rows per invocation"},
	{"SPEC_WG", 4, "the workgroup size, as a constant the code can size arrays with"},
	{"SPEC_KEYS", 5, "keys per online-softmax step"},
	{"SPEC_SHARE", 6, "lanes sharing each row's loads"},
	{"SPEC_MASKED", 7, "FLAG_* bits of the masks whose loads are compiled in"},
	{"SPEC_Q_TYPE", 8, "element type of Q (TYPE_*)"},
	{"SPEC_K_TYPE", 9, "element type of K"},
	{"SPEC_V_TYPE", 10, "element type of V"},
	{"SPEC_VARIANTS", 11, "VAR_* bits of the score variants compiled in"},
	{"SPEC_PAGED", 12, "K and V read through a page table"},
	{"SPEC_HALVES8", 13, "half inputs read eight a texel (loads.glsl's HALVES8)"},
	{"SPEC_QUANT_BLOCKS", 14, "quantized rows of whole blocks (loads.glsl's QUANT_BLOCKS)"},
	{"SPEC_MASK4", 15, "the masks read four keys a fetch (their FLAG_* bits)"},
	{"SPEC_BR", 16, "query rows per workgroup"},
	{"SPEC_BC", 17, "keys per tile"},
	{"SPEC_LPR", 18, "lanes per row"},
	{"SPEC_RPL", 19, "query rows per lane group"},
	{"SPEC_V_IN_K", 20, "V is the leading d_v columns of K's rows: only K is staged"},
	{"SPEC_MM", 21, "the cooperative matrices' M = N = K"},
	{"SPEC_NSG", 22, "subgroups per workgroup"},
	{"SPEC_SG", 23, "lanes per subgroup"},
	{"SPEC_DMAX", 24, "compile-time bound of d_k and d_v"},
	{"SPEC_TILE", 25, "rows staged per tile or step"},
	{"SPEC_STEP", 26, "rows of the other side per loop iteration"},
	{"SPEC_X_TYPE", 27, "element type of the input X"},
	{"SPEC_W_TYPE", 28, "element type of the weights W"},
	{"SPEC_Y_TYPE", 29, "element type of the output Y"},
	{"SPEC_A_TYPE", 30, "element type of A"},
	{"SPEC_B_TYPE", 31, "element type of B"},
	{"SPEC_SRC_TYPE", 32, "element type of the source"},
}

// localSizeTag tags a spec struct's workgroup-size field (ID 0).
const localSizeTag = "local_size_x_id"

// specID is the ID of the GLSL constant named name (-1: none).
func specID(name string) int {
	if name == localSizeTag {
		return 0
	}
	macro := "SPEC_" + strings.TrimSuffix(name, "_SPEC")
	for _, n := range specIDs {
		if n.name == macro {
			return n.value
		}
	}
	return -1
}

// specConstants is a spec struct's fields (int32, tagged `spec:"NAME"`)
// as (ID, value) pairs, entry i for ID i from 0 to the largest ID the
// struct sets: the IDs between that it does not set get 0, which no
// kernel reads (TestSpecConstantsByName: a family's source declares no
// constant its struct leaves unset). Dense because Khronos' validation
// layer (ShaderStageState::GetInt32ConstantValue, 1.4.309 and later)
// reads the value of constant_id i from map entry i: with sparse entries
// it checked the cooperative-matrix kernels against their default sizes.
func specConstants(s any) []core.SpecConstant {
	v := reflect.ValueOf(s)
	var out []core.SpecConstant
	for i := 0; i < v.NumField(); i++ {
		id := specID(v.Type().Field(i).Tag.Get("spec"))
		for len(out) <= id {
			out = append(out, core.SpecConstant{ID: uint32(len(out))})
		}
		out[id].Value = int32(v.Field(i).Int())
	}
	return out
}

// rowSpec is attention.comp's (the row kernels', additive too).
type rowSpec struct {
	WorkGroup   int32 `spec:"local_size_x_id"`
	D4          int32 `spec:"D4"`
	Rows        int32 `spec:"ROWS"`
	WG          int32 `spec:"WG"`
	Keys        int32 `spec:"KEYS"`
	Masked      int32 `spec:"MASKED"`
	Share       int32 `spec:"SHARE"`
	QType       int32 `spec:"Q_TYPE"`
	KType       int32 `spec:"K_TYPE"`
	VType       int32 `spec:"V_TYPE"`
	Variants    int32 `spec:"VARIANTS"`
	Paged       int32 `spec:"PAGED"`
	Halves8     int32 `spec:"HALVES8_SPEC"`
	QuantBlocks int32 `spec:"QUANT_BLOCKS_SPEC"`
	Mask4       int32 `spec:"MASK4_SPEC"`
}

// tiledSpec is attention_tiled.comp's.
type tiledSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	D4        int32 `spec:"D4"`
	BR        int32 `spec:"BR"`
	BC        int32 `spec:"BC"`
	LPR       int32 `spec:"LPR"`
	Masked    int32 `spec:"MASKED"`
	QType     int32 `spec:"Q_TYPE"`
	KType     int32 `spec:"K_TYPE"`
	VType     int32 `spec:"V_TYPE"`
	Variants  int32 `spec:"VARIANTS"`
	Paged     int32 `spec:"PAGED"`
	RPL       int32 `spec:"RPL"`
	DV4       int32 `spec:"DV4"`
	VInK      int32 `spec:"V_IN_K"`
}

// coopSpec is attention_coopmat.comp's.
type coopSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	D4        int32 `spec:"D4"`
	BR        int32 `spec:"BR"`
	BC        int32 `spec:"BC"`
	MM        int32 `spec:"MM"`
	NSG       int32 `spec:"NSG"`
	SG        int32 `spec:"SG"`
	Masked    int32 `spec:"MASKED"`
	Variants  int32 `spec:"VARIANTS"`
	QType     int32 `spec:"Q_TYPE"`
	KType     int32 `spec:"K_TYPE"`
	VType     int32 `spec:"V_TYPE"`
}

// backwardSpec is attention_backward.comp's.
type backwardSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	Masked    int32 `spec:"MASKED"`
	QType     int32 `spec:"Q_TYPE"`
	KType     int32 `spec:"K_TYPE"`
	VType     int32 `spec:"V_TYPE"`
	Variants  int32 `spec:"VARIANTS"`
	DMax      int32 `spec:"DMAX"`
	Tile      int32 `spec:"TILE"`
}

// backwardRowsSpec is attention_backward_rows.comp's.
type backwardRowsSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	D4        int32 `spec:"D4"`
	Rows      int32 `spec:"ROWS"`
	WG        int32 `spec:"WG"`
	Step      int32 `spec:"STEP"`
	Share     int32 `spec:"SHARE"`
	Masked    int32 `spec:"MASKED"`
	QType     int32 `spec:"Q_TYPE"`
	KType     int32 `spec:"K_TYPE"`
	VType     int32 `spec:"V_TYPE"`
	Variants  int32 `spec:"VARIANTS"`
}

// linearSpec is linear.comp's.
type linearSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	XType     int32 `spec:"X_TYPE"`
	WType     int32 `spec:"W_TYPE"`
}

// linearCoopSpec is linear_coopmat.comp's.
type linearCoopSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	MM        int32 `spec:"MM"`
	Tile      int32 `spec:"TILE"`
	SG        int32 `spec:"SG"`
}

// gradSpec is linear_grad.comp's.
type gradSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	AType     int32 `spec:"A_TYPE"`
	BType     int32 `spec:"B_TYPE"`
}

// ropeSpec is rope.comp's.
type ropeSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	XType     int32 `spec:"X_TYPE"`
}

// q8StoreSpec is q8_store.comp's: the input's type and the quantized
// output's.
type q8StoreSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	XType     int32 `spec:"X_TYPE"`
	YType     int32 `spec:"Y_TYPE"`
}

// mergeSpec is attention_merge.comp's.
type mergeSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
}

// regroupSpec is regroup.comp's.
type regroupSpec struct {
	WorkGroup int32 `spec:"local_size_x_id"`
	SrcType   int32 `spec:"SRC_TYPE"`
}

func (s rowSpec) constants() []core.SpecConstant          { return specConstants(s) }
func (s tiledSpec) constants() []core.SpecConstant        { return specConstants(s) }
func (s coopSpec) constants() []core.SpecConstant         { return specConstants(s) }
func (s backwardSpec) constants() []core.SpecConstant     { return specConstants(s) }
func (s backwardRowsSpec) constants() []core.SpecConstant { return specConstants(s) }
func (s linearSpec) constants() []core.SpecConstant       { return specConstants(s) }
func (s linearCoopSpec) constants() []core.SpecConstant   { return specConstants(s) }
func (s gradSpec) constants() []core.SpecConstant         { return specConstants(s) }
func (s ropeSpec) constants() []core.SpecConstant         { return specConstants(s) }
func (s q8StoreSpec) constants() []core.SpecConstant      { return specConstants(s) }
func (s mergeSpec) constants() []core.SpecConstant        { return specConstants(s) }
func (s regroupSpec) constants() []core.SpecConstant      { return specConstants(s) }
