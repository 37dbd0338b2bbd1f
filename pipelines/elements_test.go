package pipelines

import (
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
)

// TestElementsIsTheTable: shaders/elements.glsl, the kernels' side of the
// quantized element types, is what core.QuantTypes generates.
func TestElementsIsTheTable(t *testing.T) {
	want, err := ElementsGLSL()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(shaderFile(t, "elements.glsl")); got != want {
		t.Errorf("shaders/elements.glsl is not pipelines.ElementsGLSL(): run go generate ./pipelines\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// TestEveryQuantTypeHasItsFunctions: each quantized type has its two
// dequantization functions and its place in the dispatch in the
// generated GLSL, and q8_store.comp defines the device quantizer the
// table names for it.
func TestEveryQuantTypeHasItsFunctions(t *testing.T) {
	text, err := ElementsGLSL()
	if err != nil {
		t.Fatal(err)
	}
	store := string(shaderFile(t, "q8_store.comp"))
	for _, q := range core.QuantTypes {
		for _, want := range []string{
			"vec4 dequant4_" + q.Name + "(uint w, int shift)",
			"float dequant1_" + q.Name + "(uint w, int bit)",
			"dequant4_" + q.Name + "(w, shift)",
			"if ((T) == " + typeCode(q) + ") " + q.DeviceQuantizer + "(base, dst);",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: elements.glsl lacks %q", q.Name, want)
			}
		}
		if !strings.Contains(store, "void "+q.DeviceQuantizer+"(int base, int dst)") {
			t.Errorf("%s: q8_store.comp defines no %s(int base, int dst)", q.Name, q.DeviceQuantizer)
		}
	}
}
