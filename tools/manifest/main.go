// Command manifest writes the files of shaders/ generated from package
// pipelines' tables (`go generate ./pipelines` runs it): manifest.txt from
// the variant table pipelines.Variants, interface.glsl from the shader
// interface table, elements.glsl from the quantized element types'
// table, core.QuantTypes:
//
//	go run ./tools/manifest shaders/manifest.txt shaders/interface.glsl shaders/elements.glsl
package main

import (
	"fmt"
	"os"

	"github.com/vkattn/vkattn/pipelines"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: manifest shaders/manifest.txt shaders/interface.glsl shaders/elements.glsl")
		os.Exit(2)
	}
	elements, err := pipelines.ElementsGLSL()
	if err != nil {
		fmt.Fprintln(os.Stderr, "manifest:", err)
		os.Exit(1)
	}
	for _, f := range []struct{ path, text string }{
		{os.Args[1], pipelines.Manifest()},
		{os.Args[2], pipelines.ShaderInterface()},
		{os.Args[3], elements},
	} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "manifest:", err)
			os.Exit(1)
		}
	}
}
