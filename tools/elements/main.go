// Command elements writes shaders/elements.glsl from the quantized
// element types' table, core.QuantTypes (`go generate ./pipelines` runs
// it):
//
//	go run ./tools/elements shaders/elements.glsl
package main

import (
	"fmt"
	"os"

	"github.com/vkattn/vkattn/pipelines"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: elements shaders/elements.glsl")
		os.Exit(2)
	}
	text, err := pipelines.ElementsGLSL()
	if err == nil {
		err = os.WriteFile(os.Args[1], []byte(text), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "elements:", err)
		os.Exit(1)
	}
}
