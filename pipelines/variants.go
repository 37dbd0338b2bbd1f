package pipelines

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vkattn/vkattn/core"
)

//go:generate go run ../tools/manifest ../shaders/manifest.txt ../shaders/interface.glsl ../shaders/elements.glsl

// Family is a kernel family: one GLSL source in shaders/.
type Family int

const (
	FamilyAttention          Family = iota // attention.comp, q.k scores
	FamilyAdditive                         // attention.comp, w_a.tanh(q + k) scores
	FamilyCombine                          // attention_combine.comp, the split-K merge
	FamilyLinear                           // linear.comp, Y = X W^T + b
	FamilyHeadMean                         // head_mean.comp, weights averaged over heads
	FamilySelftest                         // selftest.comp, the vk layer's own tests
	FamilyHeatmap                          // heat_colour.comp, the viewer's picture of weights
	FamilyTiled                            // attention_tiled.comp, q.k scores, workgroup-tiled (GPUs)
	FamilyRoPE                             // rope.comp, rotary position embeddings
	FamilyQ8Store                          // q8_store.comp, quantization into a quantized tensor
	FamilyBackwardQ                        // attention_backward.comp, dQ (and D, the sinks' shares)
	FamilyBackwardKV                       // attention_backward.comp, dK and dV
	FamilyAdditiveBackwardQ                // attention_backward.comp, additive scores: dq
	FamilyAdditiveBackwardKV               // attention_backward.comp, additive scores: dk, dv, dw_a
	FamilyCoopmat                          // attention_coopmat.comp, q.k scores on cooperative matrices (float16)
	FamilyLinearCoopmat                    // linear_coopmat.comp, Y = X W^T + b on cooperative matrices (float16)
	FamilyMerge                            // attention_merge.comp, partial attentions (O, LSE) merged into one
	FamilyLinearGrad                       // linear_grad.comp, the dense layers' gradients C = A B^T (+ C)
	FamilyRegroup                          // regroup.comp, gradients copied between layouts and summed over rows
	FamilyBackwardRowsQ                    // attention_backward_rows.comp, dQ (and D, the sinks' shares) as row kernels (CPUs)
	FamilyBackwardRowsKV                   // attention_backward_rows.comp, dK and dV as row kernels (CPUs)
)

var families = [...]struct{ name, source, define string }{
	FamilyAttention:          {"attention", "attention.comp", ""},
	FamilyAdditive:           {"additive", "attention.comp", "-DADDITIVE=1"},
	FamilyCombine:            {"attention_combine", "attention_combine.comp", ""},
	FamilyLinear:             {"linear", "linear.comp", ""},
	FamilyHeadMean:           {"head_mean", "head_mean.comp", ""},
	FamilySelftest:           {"selftest", "selftest.comp", ""},
	FamilyHeatmap:            {"heat_colour", "heat_colour.comp", ""},
	FamilyTiled:              {"attention_tiled", "attention_tiled.comp", ""},
	FamilyRoPE:               {"rope", "rope.comp", ""},
	FamilyQ8Store:            {"q8_store", "q8_store.comp", ""},
	FamilyBackwardQ:          {"attention_backward_q", "attention_backward.comp", ""},
	FamilyBackwardKV:         {"attention_backward_kv", "attention_backward.comp", "-DKV_PASS=1"},
	FamilyAdditiveBackwardQ:  {"additive_backward_q", "attention_backward.comp", "-DADDITIVE=1"},
	FamilyAdditiveBackwardKV: {"additive_backward_kv", "attention_backward.comp", "-DKV_PASS=1 -DADDITIVE=1"},
	FamilyCoopmat:            {"attention_coopmat", "attention_coopmat.comp", ""},
	FamilyLinearCoopmat:      {"linear_coopmat", "linear_coopmat.comp", ""},
	FamilyMerge:              {"attention_merge", "attention_merge.comp", ""},
	FamilyLinearGrad:         {"linear_grad", "linear_grad.comp", ""},
	FamilyRegroup:            {"regroup", "regroup.comp", ""},
	FamilyBackwardRowsQ:      {"attention_backward_rows_q", "attention_backward_rows.comp", ""},
	FamilyBackwardRowsKV:     {"attention_backward_rows_kv", "attention_backward_rows.comp", "-DKV_PASS=1"},
}

func (f Family) String() string {
	if f < 0 || int(f) >= len(families) {
		return fmt.Sprintf("Family(%d)", int(f))
	}
	return families[f].name
}

// Variant is one SPIR-V build of a kernel family: the compile-time choices
// that the GLSL source takes as #defines. It names its SPIR-V (Name) and is
// part of the kernel cache key; the run-time choices (tile sizes, workgroup
// size, mask loads) are specialization constants on top of it.
type Variant struct {
	Family Family
	// Path is how the kernel reads its inputs; AutoLoadPath for the families
	// with one build (combine, head mean, selftest).
	Path   core.LoadPath
	Vec4   bool // inputs read as vec4s
	SplitK bool // keys split over lanes (flash-decoding), merged by FamilyCombine
	Shared bool // K/V rows fetched once per subgroup and shared by shuffles
	Quant  bool // K or V quantized (core.QuantTypes; only these builds read them)
}

// Name is the variant's SPIR-V name (shaders/<Name>.spv).
func (v Variant) Name() string {
	if v.Path == core.AutoLoadPath {
		return v.Family.String()
	}
	shape := "scalar"
	if v.Vec4 {
		shape = "vec4"
	}
	name := v.Family.String() + "_" + v.Path.String() + "_" + shape
	if v.SplitK {
		name += "_split"
	}
	if v.Shared {
		name += "_shared"
	}
	if v.Quant {
		name += "_q8" // the name predates the other quantized types
	}
	return name
}

func (v Variant) String() string { return v.Name() }

// defines are the glslc flags that build the variant from its source.
func (v Variant) defines() []string {
	var d []string
	if v.Path == core.TexelLoadPath {
		d = append(d, "-DTEXEL_LOADS=1")
	}
	if v.Vec4 {
		d = append(d, "-DVEC4_LOADS=1")
	}
	if v.SplitK {
		d = append(d, "-DSPLIT_K=1")
	}
	if v.Shared {
		d = append(d, "-DSHARED_LOADS=1")
	}
	if v.Quant {
		d = append(d, "-DQUANT_LOADS=1")
	}
	if f := families[v.Family].define; f != "" {
		d = append(d, f)
	}
	return d
}

// Variants is every SPIR-V variant vkattn ships, in manifest order: the one
// table shaders/manifest.txt is generated from (go generate ./pipelines)
// and that the planner's reachable variants are tested against.
var Variants = func() []Variant {
	var vs []Variant
	paths := []core.LoadPath{core.TexelLoadPath, core.StorageLoadPath}
	for _, p := range paths {
		for _, vec4 := range []bool{true, false} {
			vs = append(vs, Variant{Family: FamilyAttention, Path: p, Vec4: vec4})
		}
	}
	vs = append(vs,
		Variant{Family: FamilyAttention, Path: core.TexelLoadPath, Vec4: true, SplitK: true},
		Variant{Family: FamilyAttention, Path: core.TexelLoadPath, Vec4: true, Shared: true},
		Variant{Family: FamilyAttention, Path: core.StorageLoadPath, Vec4: true, SplitK: true},
		Variant{Family: FamilyCombine},
		Variant{Family: FamilySelftest})
	for _, f := range []Family{FamilyAdditive, FamilyLinear} {
		for _, p := range paths {
			for _, vec4 := range []bool{true, false} {
				vs = append(vs, Variant{Family: f, Path: p, Vec4: vec4})
			}
		}
	}
	vs = append(vs, Variant{Family: FamilyHeadMean}, Variant{Family: FamilyHeatmap}, Variant{Family: FamilyRoPE}, Variant{Family: FamilyQ8Store},
		Variant{Family: FamilyBackwardQ}, Variant{Family: FamilyBackwardKV},
		Variant{Family: FamilyAdditiveBackwardQ}, Variant{Family: FamilyAdditiveBackwardKV})
	// The GPU kernels read storage buffers only; split-K needs vec4 rows.
	tiled := []Variant{{Family: FamilyTiled, Path: core.StorageLoadPath, Vec4: true},
		{Family: FamilyTiled, Path: core.StorageLoadPath},
		{Family: FamilyTiled, Path: core.StorageLoadPath, Vec4: true, SplitK: true}}
	vs = append(vs, tiled...)
	// The cooperative-matrix kernels: float16 rows read by element.
	vs = append(vs, Variant{Family: FamilyCoopmat, Path: core.StorageLoadPath}, Variant{Family: FamilyLinearCoopmat, Path: core.StorageLoadPath})
	// Quantized K and V: the scaled dot-product kernels again, reading
	// them (not the shared-loads build: the planner keeps them off it).
	// One build reads every type, by the K and V types' specialization
	// constants.
	for _, v := range slices.Clone(vs) {
		if (v.Family == FamilyAttention || v.Family == FamilyTiled) && !v.Shared {
			v.Quant = true
			vs = append(vs, v)
		}
	}
	// Partial attentions merged (Device.Merge).
	vs = append(vs, Variant{Family: FamilyMerge})
	// The layers' backward pass: its products, on either path as the
	// forward's dense layers, and its copies and sums.
	for _, p := range paths {
		for _, vec4 := range []bool{true, false} {
			vs = append(vs, Variant{Family: FamilyLinearGrad, Path: p, Vec4: vec4})
		}
	}
	vs = append(vs, Variant{Family: FamilyRegroup})
	// The backward as row kernels (lavapipe's plan): texel views, vec4
	// rows, rows shared across a subgroup.
	vs = append(vs, Variant{Family: FamilyBackwardRowsQ, Path: core.TexelLoadPath, Vec4: true, Shared: true},
		Variant{Family: FamilyBackwardRowsKV, Path: core.TexelLoadPath, Vec4: true, Shared: true})
	return vs
}()

// Manifest is the text of shaders/manifest.txt: a line per variant with its
// name, source and glslc flags, read by tools/glslc.sh.
func Manifest() string {
	var b strings.Builder
	b.WriteString(`# Generated from pipelines.Variants by ` + "`go generate ./pipelines`" + `: do not edit.
# One line per SPIR-V variant: output name, GLSL source, glslc flags.
# tools/glslc.sh builds shaders/<name>.spv from this list; --check verifies
# that the committed .spv files match their sources (and their includes).
`)
	for _, v := range Variants {
		line := fmt.Sprintf("%-28s %-22s %s", v.Name(), families[v.Family].source, strings.Join(v.defines(), " "))
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return b.String()
}

// KernelSpec is a kernel as the device builds it: its variant's SPIR-V,
// the types of its bindings (binding i has type Bindings[i]), its
// specialization constants (a family's spec struct's constants), its push-constant
// bytes and the subgroup size it runs in whole (0: any).
type KernelSpec struct {
	Variant  Variant
	Bindings []core.BindingType
	Spec     []core.SpecConstant
	Push     uint32
	Subgroup uint32
}

// VariantNamed is the variant whose Name is name (a public plan's
// KernelPlan.Variant), and whether there is one.
func VariantNamed(name string) (Variant, bool) {
	for _, v := range Variants {
		if v.Name() == name {
			return v, true
		}
	}
	return Variant{}, false
}
