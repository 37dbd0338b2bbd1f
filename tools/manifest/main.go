// Command manifest writes shaders/manifest.txt from the variant table
// pipelines.Variants, and shaders/interface.glsl from the shader
// interface table (`go generate ./pipelines` runs it):
//
//	go run ./tools/manifest shaders/manifest.txt shaders/interface.glsl
package main

import (
	"fmt"
	"os"

	"github.com/vkattn/vkattn/pipelines"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: manifest shaders/manifest.txt shaders/interface.glsl")
		os.Exit(2)
	}
	for _, f := range []struct{ path, text string }{
		{os.Args[1], pipelines.Manifest()},
		{os.Args[2], pipelines.ShaderInterface()},
	} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "manifest:", err)
			os.Exit(1)
		}
	}
}
