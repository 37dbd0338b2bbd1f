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

// TestParamsMatchGLSL: the Go Params block has the members of the GLSL one
// (shaders/attention_params.glsl), with the same names, types and order,
// and encodes to 16 bytes a member, as std140 lays out vec4s and ivec4s.
func TestParamsMatchGLSL(t *testing.T) {
	src := shaderFile(t, "attention_params.glsl")
	block := regexp.MustCompile(`(?s)uniform Params \{(.*)\} P;`).FindSubmatch(src)
	if block == nil {
		t.Fatal("no Params block in attention_params.glsl")
	}
	var glsl []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\s+(\w+);`).FindAllSubmatch(block[1], -1) {
		glsl = append(glsl, string(m[1])+" "+string(m[2]))
	}
	typ := reflect.TypeOf(attentionParams{})
	var goMembers []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		glslType := map[reflect.Type]string{reflect.TypeOf([4]int32{}): "ivec4", reflect.TypeOf([4]float32{}): "vec4"}[f.Type]
		name := []rune(f.Name)
		name[0] = unicode.ToLower(name[0])
		goMembers = append(goMembers, glslType+" "+string(name))
	}
	if strings.Join(glsl, "; ") != strings.Join(goMembers, "; ") {
		t.Errorf("Params members differ:\nGLSL: %s\nGo:   %s", strings.Join(glsl, "; "), strings.Join(goMembers, "; "))
	}
	p := attentionParams{}
	// 16 KiB: the uniform-buffer range every Vulkan device reaches.
	if n := len(p.encode()); n != 16*len(glsl) || n > 16<<10 {
		t.Errorf("Params encode to %d bytes, want %d (and at most 16 KiB)", n, 16*len(glsl))
	}
}
