package pipelines

import (
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// specValue is the value spec gives the GLSL constant named name.
func specValue(t *testing.T, spec []core.SpecConstant, name string) int32 {
	t.Helper()
	for _, c := range spec {
		if int(c.ID) == specID(name) {
			return c.Value
		}
	}
	t.Errorf("no specialization constant %s (ID %d) in %v", name, specID(name), spec)
	return 0
}

// familySpec is the spec struct family f's kernels are created with (nil:
// none).
func familySpec(f Family) any {
	switch f {
	case FamilyAttention, FamilyAdditive:
		return rowSpec{}
	case FamilyTiled:
		return tiledSpec{}
	case FamilyCoopmat:
		return coopSpec{}
	case FamilyBackwardQ, FamilyBackwardKV, FamilyAdditiveBackwardQ, FamilyAdditiveBackwardKV:
		return backwardSpec{}
	case FamilyBackwardRowsQ, FamilyBackwardRowsKV:
		return backwardRowsSpec{}
	case FamilyLinear:
		return linearSpec{}
	case FamilyLinearCoopmat:
		return linearCoopSpec{}
	case FamilyLinearGrad:
		return gradSpec{}
	case FamilyRoPE:
		return ropeSpec{}
	case FamilyQ8Store:
		return q8StoreSpec{}
	case FamilyMerge:
		return mergeSpec{}
	case FamilyRegroup:
		return regroupSpec{}
	}
	return nil
}

var (
	constantDecl  = regexp.MustCompile(`layout\s*\(\s*constant_id\s*=\s*(\w+)\s*\)\s*const\s+\w+\s+(\w+)`)
	localSizeDecl = regexp.MustCompile(`layout\s*\(\s*local_size_x_id\s*=\s*(\w+)\s*\)\s*in`)
)

// declaredConstants are the specialization constants that source and its
// includes declare: GLSL name -> ID (the workgroup size under
// localSizeTag), the ID macros resolved through the interface table.
func declaredConstants(t *testing.T, source string, seen map[string]bool) map[string]int {
	out := map[string]int{}
	if seen[source] {
		return out
	}
	seen[source] = true
	src := lineComments.ReplaceAllString(string(shaderFile(t, source)), "")
	for _, inc := range includeLine.FindAllStringSubmatch(src, -1) {
		for name, id := range declaredConstants(t, inc[1], seen) {
			out[name] = id
		}
	}
	value := func(s string) int {
		for _, n := range specIDs {
			if n.name == s {
				return n.value
			}
		}
		if s == "0" {
			return 0
		}
		t.Errorf("%s: constant ID %s is not one of interface.glsl's SPEC_*", source, s)
		return -1
	}
	for _, m := range constantDecl.FindAllStringSubmatch(src, -1) {
		out[m[2]] = value(m[1])
	}
	for _, m := range localSizeDecl.FindAllStringSubmatch(src, -1) {
		out[localSizeTag] = value(m[1])
	}
	return out
}

// TestSpecIDsOneMeaningEach: the specialization-constant IDs are distinct
// and none is 0, the workgroup size's.
func TestSpecIDsOneMeaningEach(t *testing.T) {
	seen := map[int]string{0: localSizeTag}
	for _, n := range specIDs {
		if other, ok := seen[n.value]; ok {
			t.Errorf("%s and %s share ID %d", n.name, other, n.value)
		}
		seen[n.value] = n.name
	}
}

// TestSpecConstantsByName: each family's spec struct names, field by
// field, a constant its GLSL source declares, with the ID the source
// declares it at; the source declares no constant the struct leaves
// unset; every SpecId of each SPIR-V variant is an ID the struct sets;
// and the struct's constants are dense, entry i for ID i.
func TestSpecConstantsByName(t *testing.T) {
	for _, v := range Variants {
		if familyBindings(v) == nil {
			continue // the vk layer's selftest, the viewer's heat map
		}
		t.Run(v.Name(), func(t *testing.T) {
			s := familySpec(v.Family)
			declared := declaredConstants(t, families[v.Family].source, map[string]bool{})
			set := map[int]bool{}
			if s != nil {
				typ := reflect.TypeOf(s)
				for i := 0; i < typ.NumField(); i++ {
					name := typ.Field(i).Tag.Get("spec")
					id, ok := declared[name]
					switch {
					case !ok:
						t.Errorf("%s.%s: %s declares no constant %s", typ.Name(), typ.Field(i).Name, families[v.Family].source, name)
					case id != specID(name):
						t.Errorf("%s.%s: %s is constant_id %d in the source, the struct sets ID %d", typ.Name(), typ.Field(i).Name, name, id, specID(name))
					}
					set[specID(name)] = true
				}
				if len(set) != typ.NumField() {
					t.Errorf("%s: two fields share an ID", typ.Name())
				}
				checkSpecEntries(t, typ)
			}
			var unset []string
			for name, id := range declared {
				if !set[id] {
					unset = append(unset, name)
				}
			}
			sort.Strings(unset)
			if len(unset) > 0 {
				t.Errorf("%s declares %s; the Go side does not set them", families[v.Family].source, strings.Join(unset, ", "))
			}
			m := variantModule(t, v)
			for _, id := range m.specIDs() {
				if !set[id] {
					t.Errorf("the SPIR-V has SpecId %d, which the Go side does not set", id)
				}
			}
		})
	}
}

// checkSpecEntries: the constants of a spec struct of type typ, each
// field given its own value, are entry i for ID i, each field's value at
// its ID and 0 elsewhere.
func checkSpecEntries(t *testing.T, typ reflect.Type) {
	t.Helper()
	v := reflect.New(typ).Elem()
	want := map[int]int32{}
	for i := 0; i < typ.NumField(); i++ {
		v.Field(i).SetInt(int64(100 + i))
		want[specID(typ.Field(i).Tag.Get("spec"))] = int32(100 + i)
	}
	for i, c := range specConstants(v.Interface()) {
		if int(c.ID) != i || c.Value != want[i] {
			t.Errorf("%s: entry %d is ID %d = %d, want ID %d = %d", typ.Name(), i, c.ID, c.Value, i, want[i])
		}
	}
}
