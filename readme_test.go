package vkattn_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEExampleCompiles compiles each Go block of README.md as a
// package of this module (through a build overlay, so nothing is written
// into the tree; its main function an ordinary one): the first Go call a
// newcomer copies must compile against the API as it is.
func TestREADMEExampleCompiles(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the README's example with")
	}
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(text))
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range blocks {
		dir := t.TempDir()
		file := filepath.Join(dir, "main.go")
		src = strings.Replace(src, "package main", "package readmeexample", 1)
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// A package directory that does not exist in the module: the
		// overlay alone makes it.
		pkg := filepath.Join(root, "internal", "readme-example-overlay")
		overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(pkg, "main.go"): file}})
		if err != nil {
			t.Fatal(err)
		}
		ov := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ov, overlay, 0o644); err != nil {
			t.Fatal(err)
		}
		// As a package of its own, not main: go build compiles it against
		// the packages already built and links nothing (linking the cgo
		// binary took ~25 s of CPU).
		cmd := exec.Command(goTool, "build", "-overlay", ov, "./internal/readme-example-overlay")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README.md's Go block %d does not build: %v\n%s", i+1, err, out)
		}
	}
}

// goBlocks returns the contents of the ```go fenced blocks of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	for {
		start := strings.Index(md, "```go\n")
		if start < 0 {
			return blocks
		}
		md = md[start+len("```go\n"):]
		end := strings.Index(md, "\n```")
		if end < 0 {
			return append(blocks, md)
		}
		blocks = append(blocks, md[:end+1])
		md = md[end+len("\n```"):]
	}
}
