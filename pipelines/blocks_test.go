package pipelines

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// shaderFile reads a file of shaders/, which the tests hold the tables here
// to.
func shaderFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "shaders", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// familyBlock is the Go struct the Go side encodes family f's parameter or
// push-constant block from (nil: the kernel has none).
func familyBlock(f Family) any {
	switch f {
	case FamilyAttention, FamilyAdditive, FamilyTiled, FamilyCoopmat, FamilyCombine,
		FamilyBackwardQ, FamilyBackwardKV, FamilyAdditiveBackwardQ, FamilyAdditiveBackwardKV,
		FamilyBackwardRowsQ, FamilyBackwardRowsKV:
		return attentionParams{}
	case FamilyLinear, FamilyLinearCoopmat:
		return linearParams{}
	case FamilyLinearGrad:
		return gradParams{}
	case FamilyRegroup:
		return regroupPush{}
	case FamilyMerge:
		return MergePush{}
	case FamilyQ8Store:
		return Q8StorePush{}
	case FamilyRoPE:
		return RoPEPush{}
	case FamilyHeadMean:
		return HeadMeanPush{}
	case FamilyHeatmap:
		return HeatColourPush{}
	}
	return nil
}

// glslBlock is a uniform or push-constant block as a GLSL file declares it.
type glslBlock struct {
	file    string   // the shaders/ file that declares it
	layout  string   // its layout qualifiers
	members []string // "type name", in order
}

var (
	includeLine  = regexp.MustCompile(`(?m)^\s*#include\s+"([^"]+)"`)
	blockDecl    = regexp.MustCompile(`layout\s*\(([^)]*)\)\s*uniform\s+\w+\s*\{([^}]*)\}\s*\w+\s*;`)
	memberDecl   = regexp.MustCompile(`(\w+)\s+(\w+)\s*;`)
	lineComments = regexp.MustCompile(`//[^\n]*`)
)

// declaredBlocks are the uniform and push-constant blocks that source and
// the files it includes (once each, as their include guards make it)
// declare.
func declaredBlocks(t *testing.T, source string, seen map[string]bool) []glslBlock {
	if seen[source] {
		return nil
	}
	seen[source] = true
	src := lineComments.ReplaceAllString(string(shaderFile(t, source)), "")
	var out []glslBlock
	for _, inc := range includeLine.FindAllStringSubmatch(src, -1) {
		out = append(out, declaredBlocks(t, inc[1], seen)...)
	}
	for _, m := range blockDecl.FindAllStringSubmatch(src, -1) {
		b := glslBlock{file: source, layout: strings.Join(strings.Fields(m[1]), " ")}
		for _, mm := range memberDecl.FindAllStringSubmatch(m[2], -1) {
			b.members = append(b.members, mm[1]+" "+mm[2])
		}
		out = append(out, b)
	}
	return out
}

// goMembers are a block struct's fields as GLSL members, "type Name".
func goMembers(t *testing.T, typ reflect.Type) []string {
	glslType := map[reflect.Type]string{
		reflect.TypeOf(int32(0)): "int", reflect.TypeOf(uint32(0)): "uint", reflect.TypeOf(float32(0)): "float",
		reflect.TypeOf([4]int32{}): "ivec4", reflect.TypeOf([4]float32{}): "vec4",
	}
	var out []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		ty, ok := glslType[f.Type]
		if !ok {
			t.Errorf("%s.%s: type %v has no GLSL member type here", typ.Name(), f.Name, f.Type)
		}
		out = append(out, ty+" "+f.Name)
	}
	return out
}

// exported is GLSL members "type name" as their Go fields are named: the
// first letter of the name upper-cased.
func exported(members []string) []string {
	out := make([]string, len(members))
	for i, m := range members {
		ty, name, _ := strings.Cut(m, " ")
		r := []rune(name)
		r[0] = unicode.ToUpper(r[0])
		out[i] = ty + " " + string(r)
	}
	return out
}

// TestBlocksMatchGLSL: every parameter and push-constant block of the
// kernels this package builds is one GLSL declaration, and the Go struct
// the Go side encodes it from has its members (names, types, order); in
// each SPIR-V variant the block's member offsets are where the Go encoder
// writes each field. A member added, moved or retyped on one side only
// fails here.
func TestBlocksMatchGLSL(t *testing.T) {
	checked := map[Family]bool{}
	for _, v := range Variants {
		block := familyBlock(v.Family)
		if v.Family == FamilySelftest {
			continue // the vk layer's own, below this package
		}
		t.Run(v.Name(), func(t *testing.T) {
			m := variantModule(t, v)
			spirv := m.parameterBlocks()
			if block == nil {
				if len(spirv) != 0 {
					t.Errorf("the SPIR-V has %d parameter blocks; familyBlock names none", len(spirv))
				}
				return
			}
			typ := reflect.TypeOf(block)
			offsets, size := blockLayout(typ)
			if !checked[v.Family] {
				checked[v.Family] = true
				decls := declaredBlocks(t, families[v.Family].source, map[string]bool{})
				if len(decls) != 1 {
					t.Fatalf("%s and its includes declare %d parameter blocks, want 1", families[v.Family].source, len(decls))
				}
				glsl, goSide := exported(decls[0].members), goMembers(t, typ)
				if strings.Join(glsl, "; ") != strings.Join(goSide, "; ") {
					t.Errorf("%s's block and %s differ:\nGLSL: %s\nGo:   %s", decls[0].file, typ.Name(), strings.Join(glsl, "; "), strings.Join(goSide, "; "))
				}
				push := strings.Contains(decls[0].layout, "push_constant")
				// 16 KiB: the uniform-buffer range every Vulkan device reaches;
				// 128 bytes: the push constants every device takes.
				if limit := map[bool]int{false: 16 << 10, true: 128}[push]; size > limit || len(encodeBlock(block)) != size {
					t.Errorf("%s encodes to %d bytes (layout %d), at most %d", typ.Name(), len(encodeBlock(block)), size, limit)
				}
			}
			if len(spirv) != 1 {
				t.Fatalf("the SPIR-V has %d parameter blocks, want 1 (%s)", len(spirv), typ.Name())
			}
			if !reflect.DeepEqual(spirv[0], offsets) {
				t.Errorf("member offsets: SPIR-V %v, %s encodes at %v", spirv[0], typ.Name(), offsets)
			}
		})
	}
}

// TestEncodeBlockOffsets: encodeBlock puts a scalar at the next multiple
// of 4 and an ivec4 or vec4 at the next multiple of 16, as std140 and
// std430 lay them out (offsets derived by hand from those rules), and
// writes little-endian values with zero padding.
func TestEncodeBlockOffsets(t *testing.T) {
	type mixed struct {
		A int32
		B [4]int32
		C float32
		D uint32
		E [4]float32
		F int32
	}
	offsets, size := blockLayout(reflect.TypeOf(mixed{}))
	if want := []int{0, 16, 32, 36, 48, 64}; !reflect.DeepEqual(offsets, want) || size != 68 {
		t.Errorf("offsets %v, size %d; want %v, 68", offsets, size, want)
	}
	got := encodeBlock(mixed{A: -2, B: [4]int32{1, 2, 3, 4}, C: 1.5, D: 7, E: [4]float32{0, 0, 0, -1}, F: 9})
	want := make([]byte, 68)
	put := func(at int, b ...byte) { copy(want[at:], b) }
	put(0, 0xfe, 0xff, 0xff, 0xff)                          // -2
	put(16, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0) // B
	put(32, 0, 0, 0xc0, 0x3f)                               // 1.5 = 0x3fc00000
	put(36, 7, 0, 0, 0)
	put(60, 0, 0, 0x80, 0xbf) // E.w = -1 = 0xbf800000
	put(64, 9, 0, 0, 0)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("encoded\n%x\nwant\n%x", got, want)
	}
}
