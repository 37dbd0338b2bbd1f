package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The docs a test keeps true: the files, tests, commands and flags that
// the Markdown docs and the commands' -h texts name exist in the tree and
// in the CLI.

// repoRoot is the repository's root, from this package's folder.
const repoRoot = "../.."

// docFiles are the Markdown docs the check reads.
var docFiles = []string{"README.md", "ARCHITECTURE.md", "SEMANTICS.md", "BENCHMARKS.md", "CONTRIBUTING.md", "PLATFORMS.md"}

// cliFacts is what the check compares against: each command's flags (as
// its -h lists them), the tree's files and the test functions declared.
type cliFacts struct {
	flags map[string]map[string]bool // command -> flag names
	files map[string]bool            // every file's base name
	tests map[string]bool            // Test..., Benchmark..., Example..., Fuzz...
	root  string
}

// help runs `vkattn cmd -h` and returns its text and the flags its Flags
// section lists.
func help(cmd string) (string, map[string]bool) {
	var out, errOut bytes.Buffer
	run([]string{cmd, "-h"}, &out, &errOut)
	text := out.String() + errOut.String()
	flags := map[string]bool{}
	if _, list, ok := strings.Cut(text, "\nFlags:\n"); ok {
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(list, -1) {
			flags[m[1]] = true
		}
	}
	return text, flags
}

// gatherFacts reads the CLI's command table and walks the tree at root.
func gatherFacts(t *testing.T, root string) *cliFacts {
	t.Helper()
	f := &cliFacts{flags: map[string]map[string]bool{}, files: map[string]bool{}, tests: map[string]bool{}, root: root}
	for _, c := range commands {
		_, f.flags[c.name] = help(c.name)
	}
	testFunc := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		f.files[d.Name()] = true
		if strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
				f.tests[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var (
	codeSpan   = regexp.MustCompile("`([^`\n]+)`")
	fence      = regexp.MustCompile("(?ms)^```[a-z]*\n(.*?)^```")
	pathLike   = regexp.MustCompile(`^(\./)?[A-Za-z0-9_*-][A-Za-z0-9_.*-]*(/[A-Za-z0-9_.*-]+)+/?(:[0-9]+(-[0-9]+)?)?$`)
	fileLike   = regexp.MustCompile(`^[A-Za-z0-9_-]+(_test)?\.(go|sh|py|comp|glsl|md)$`)
	testLike   = regexp.MustCompile(`^(Test|Benchmark|Example|Fuzz)[A-Z0-9]\w*$`)
	invocation = regexp.MustCompile(`(?:^|[\s/'"(])vkattn ([a-z][a-z-]*)((?: [^|;&\x60\n]*)?)`)
	example    = regexp.MustCompile(`^\s+(\S*/)?vkattn [a-z]`)
	flagName   = regexp.MustCompile(`(?:^|\s)--?([a-z][a-z0-9-]*)`)
)

// fileExtensions are those of the files a path in the docs names (a path
// without one names a folder only when it ends with /).
var fileExtensions = []string{".go", ".sh", ".py", ".comp", ".glsl", ".md", ".txt", ".json", ".spv", ".h", ".tsv", ".safetensors", ".npy"}

// checkDoc returns what text (from doc) names that the facts lack.
func (f *cliFacts) checkDoc(doc, text string) []string {
	var bad []string
	var spans []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		spans = append(spans, m[1])
	}
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		spans = append(spans, strings.Split(m[1], "\n")...)
	}
	for _, span := range spans {
		for _, word := range strings.Fields(span) {
			word = strings.Trim(word, `,;()'"`)
			if msg := f.checkWord(word); msg != "" {
				bad = append(bad, fmt.Sprintf("%s: %s", doc, msg))
			}
		}
		bad = append(bad, f.checkInvocations(doc, span)...)
	}
	return bad
}

// checkWord checks one word of a code span: a path, a file name or a test
// name.
func (f *cliFacts) checkWord(word string) string {
	switch {
	case testLike.MatchString(word):
		// A -run or -bench pattern may name the start of several.
		if !slices.ContainsFunc(slices.Collect(maps.Keys(f.tests)), func(name string) bool { return strings.HasPrefix(name, word) }) {
			return fmt.Sprintf("no test function %s", word)
		}
	case pathLike.MatchString(word) && !strings.Contains(strings.Split(strings.TrimPrefix(word, "./"), "/")[0], "."):
		path := strings.TrimPrefix(word, "./")
		if i := strings.IndexByte(path, ':'); i >= 0 {
			path = path[:i]
		}
		if !strings.HasSuffix(path, "/") && !slices.Contains(fileExtensions, filepath.Ext(path)) {
			return "" // a ratio, a shape or a package path, not a file
		}
		matches, _ := filepath.Glob(filepath.Join(f.root, path))
		if len(matches) == 0 {
			return fmt.Sprintf("no file %s", word)
		}
	case fileLike.MatchString(word):
		if !f.files[word] {
			return fmt.Sprintf("no file named %s anywhere in the tree", word)
		}
	}
	return ""
}

// checkInvocations checks each `vkattn CMD --flag ...` of a span: the
// command is the CLI's and takes the flags.
func (f *cliFacts) checkInvocations(doc, span string) []string {
	var bad []string
	for _, m := range invocation.FindAllStringSubmatch(span, -1) {
		cmd, rest := m[1], m[2]
		flags, ok := f.flags[cmd]
		if !ok {
			if cmd != "help" {
				bad = append(bad, fmt.Sprintf("%s: `vkattn %s`: no such command", doc, cmd))
			}
			continue
		}
		for _, fm := range flagName.FindAllStringSubmatch(rest, -1) {
			if name := fm[1]; !flags[name] && name != "h" && name != "help" {
				bad = append(bad, fmt.Sprintf("%s: `vkattn %s` takes no --%s", doc, cmd, name))
			}
		}
	}
	return bad
}

// checkHelp returns the flags a command's -h prose documents (lines that
// start with "  --") that its flag set lacks, and what its examples (the
// indented lines that run vkattn) name wrong.
func (f *cliFacts) checkHelp(what, cmd, text string) []string {
	prose, _, _ := strings.Cut(text, "\nFlags:\n")
	var bad []string
	for _, m := range regexp.MustCompile(`(?m)^  +--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(prose, -1) {
		if !f.flags[cmd][m[1]] {
			bad = append(bad, fmt.Sprintf("%s: documents --%s, which it does not take", what, m[1]))
		}
	}
	for _, line := range strings.Split(prose, "\n") {
		if example.MatchString(line) {
			bad = append(bad, f.checkInvocations(what, line)...)
		}
	}
	return bad
}

// TestDocsNameWhatExists: every file, test function, command and flag
// that the Markdown docs name in code (spans and blocks), and every flag a
// command's -h documents or shows in an example, exists.
func TestDocsNameWhatExists(t *testing.T) {
	f := gatherFacts(t, repoRoot)
	var bad []string
	for _, doc := range docFiles {
		text, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, f.checkDoc(doc, string(text))...)
	}
	for _, c := range commands {
		text, _ := help(c.name)
		bad = append(bad, f.checkHelp("vkattn "+c.name+" -h", c.name, text)...)
	}
	var top bytes.Buffer
	run([]string{"-h"}, &top, &top)
	bad = append(bad, f.checkHelp("vkattn -h", "", top.String())...)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestTheDocsCheckSeesARename: the check fails a doc that names a file, a
// test, a command or a flag the tree does not have, and passes the same
// doc naming what it has.
func TestTheDocsCheckSeesARename(t *testing.T) {
	f := gatherFacts(t, repoRoot)
	good := "See `kv/ragged.go`, `TestRaggedSchedules` and `tools/*.sh`:\n\n```\nvkattn decode -q q.npy --schedule steps.txt\n```\n"
	if bad := f.checkDoc("good.md", good); len(bad) != 0 {
		t.Errorf("a doc naming what exists: %v", bad)
	}
	for _, c := range []struct{ doc, want string }{
		{"See `kv/raggd.go`.", "no file kv/raggd.go"},
		{"See `raggd.go`.", "no file named raggd.go"},
		{"See `TestRaggedPlans`.", "no test function TestRaggedPlans"},
		{"Run `vkattn decod -q q.npy`.", "`vkattn decod`: no such command"},
		{"Run `vkattn decode --scheduled s.txt`.", "`vkattn decode` takes no --scheduled"},
	} {
		if bad := f.checkDoc("bad.md", c.doc); len(bad) != 1 || !strings.Contains(bad[0], c.want) {
			t.Errorf("%q: %v, want one complaint with %q", c.doc, bad, c.want)
		}
	}
}
