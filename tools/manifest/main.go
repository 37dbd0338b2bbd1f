// Command manifest writes shaders/manifest.txt from the variant table
// pipelines.Variants (`go generate ./pipelines` runs it):
//
//	go run ./tools/manifest shaders/manifest.txt
package main

import (
	"fmt"
	"os"

	"github.com/vkattn/vkattn/pipelines"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: manifest shaders/manifest.txt")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], []byte(pipelines.Manifest()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "manifest:", err)
		os.Exit(1)
	}
}
