// Package shaders holds the GLSL compute sources of vkattn and the SPIR-V
// built from them by tools/glslc.sh. The SPIR-V is committed and embedded, so
// building vkattn never needs glslc.
package shaders

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed *.spv
var spirv embed.FS

// SPIRV returns the SPIR-V of the variant name as listed in manifest.txt.
func SPIRV(name string) ([]byte, error) {
	b, err := spirv.ReadFile(name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("shaders: no SPIR-V variant %q (listed in shaders/manifest.txt?)", name)
	}
	return b, nil
}

// Names lists the embedded SPIR-V variants.
func Names() []string {
	entries, _ := spirv.ReadDir(".") // the embedded root always reads
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".spv"))
	}
	return names
}
