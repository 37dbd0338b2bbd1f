package apidoc

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// root is the module's directory.
func root(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// pkg is the documentation of the package in dir (its non-test files).
type pkg struct {
	doc     *doc.Package
	imports map[string]string // import name -> path, over all files
	types   map[string]*ast.TypeSpec
}

func load(t *testing.T, dir string) pkg {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	p := pkg{imports: map[string]string{}, types: map[string]*ast.TypeSpec{}}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			p.imports[local] = path
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					p.types[ts.Name.Name] = ts
				}
			}
		}
	}
	p.doc, err = doc.NewFromFiles(fset, files, "github.com/vkattn/vkattn/"+filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// foreign is the import path of the package a type expression names
// (pkg.Name, *pkg.Name, pkg.Name[...]), or "" for this package's own.
func (p pkg) foreign(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return p.foreign(x.X)
	case *ast.IndexExpr:
		return p.foreign(x.X)
	case *ast.IndexListExpr:
		return p.foreign(x.X)
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return p.imports[id.Name]
		}
	}
	return ""
}

// The packages users import whose types hold the engine's methods.
var public = []string{".", "kv", "nn"}

const module = "github.com/vkattn/vkattn"

// documentedElsewhere reports whether an alias or embedding of a type of
// package path is allowed: package core documents its own types.
func documentedElsewhere(path string) bool { return path == module+"/core" }

// problems lists, for every exported type of p, what of its methods or
// fields p's documentation cannot show: an alias of a type outside core,
// a named type over an internal struct with exported or embedded fields,
// a struct that embeds a type outside core, and a type go/doc does not
// list.
func problems(t *testing.T, base string, p pkg) []string {
	var out []string
	listed := map[string]*doc.Type{}
	for _, ty := range p.doc.Types {
		listed[ty.Name] = ty
	}
	for name, ts := range p.types {
		if !ast.IsExported(name) {
			continue
		}
		if listed[name] == nil {
			out = append(out, name+": not in the package's documentation")
		}
		if path := p.foreign(ts.Type); path != "" {
			switch {
			case ts.Assign.IsValid() && !documentedElsewhere(path):
				out = append(out, name+": an alias of a type of "+path+", whose methods and fields the package's documentation does not show")
			case !ts.Assign.IsValid() && strings.Contains(path, "/internal/"):
				if fields := exportedFields(t, base, path, ts.Type); len(fields) > 0 {
					out = append(out, name+": a named type over "+path+"'s struct, whose exported or embedded fields "+strings.Join(fields, ", ")+" its documentation does not show")
				}
			}
		}
		if st, ok := ts.Type.(*ast.StructType); ok {
			for _, f := range st.Fields.List {
				if len(f.Names) == 0 {
					if path := p.foreign(f.Type); path != "" && !documentedElsewhere(path) {
						out = append(out, name+": embeds a type of "+path+", whose promoted methods and fields its documentation does not show")
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// exportedFields are the exported and embedded fields of the struct that
// the type expression e (pkg.Name of the internal package path) names.
func exportedFields(t *testing.T, base, path string, e ast.Expr) []string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
			continue
		case *ast.IndexExpr:
			e = x.X
			continue
		}
		break
	}
	sel := e.(*ast.SelectorExpr)
	q := load(t, filepath.Join(base, strings.TrimPrefix(path, module+"/")))
	ts := q.types[sel.Sel.Name]
	if ts == nil {
		t.Fatalf("%s has no type %s", path, sel.Sel.Name)
	}
	st, ok := ts.Type.(*ast.StructType)
	if !ok {
		return nil
	}
	var out []string
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			out = append(out, "(embedded)")
		}
		for _, n := range f.Names {
			if n.IsExported() {
				out = append(out, n.Name)
			}
		}
	}
	return out
}

func TestPublicTypesShowTheirMethods(t *testing.T) {
	base := root(t)
	for _, dir := range public {
		p := load(t, filepath.Join(base, dir))
		for _, problem := range problems(t, base, p) {
			t.Errorf("package %s: %s", dir, problem)
		}
	}
}

// TestWhatUsersLookUp: the documentation shows the methods a user looks
// for first, where they look.
func TestWhatUsersLookUp(t *testing.T) {
	base := root(t)
	want := map[string]map[string][]string{
		".":  {"Device": {"Attention", "Prepare", "Upload", "TensorOver", "Merge", "Stats", "Close"}, "Tensor": {"Download", "Write", "Buffer", "Close"}, "Call": {"Run", "Record", "Output", "Close"}, "Output": {"Close", "Part"}},
		"kv": {"Cache": {"Append", "Attention", "Prepare", "PrepareStep", "Fork", "Truncate", "Close"}, "DecodeStep": {"Run", "Record", "Plan", "Close"}},
		"nn": {"MHA": {"Forward", "Prepare", "Backward"}, "MHACall": {"Run", "Record", "Output", "Close"}},
	}
	for dir, types := range want {
		p := load(t, filepath.Join(base, dir))
		for _, ty := range p.doc.Types {
			methods := types[ty.Name]
			for _, m := range ty.Methods {
				if m.Doc == "" {
					t.Errorf("package %s: %s.%s has no documentation", dir, ty.Name, m.Name)
				}
				methods = slices.DeleteFunc(methods, func(name string) bool { return name == m.Name })
			}
			if len(methods) > 0 {
				t.Errorf("package %s: the documentation of %s lacks %v", dir, ty.Name, methods)
			}
			delete(types, ty.Name)
		}
		for name := range types {
			t.Errorf("package %s: no documented type %s", dir, name)
		}
	}
}

// TestTheCheckSeesAnAlias: the check fails a package that puts back an
// alias of an internal type (the root as it was: type Device =
// engine.Device).
func TestTheCheckSeesAnAlias(t *testing.T) {
	base := root(t)
	dir := t.TempDir()
	src := `package vkattn

import "github.com/vkattn/vkattn/internal/engine"

// Device is an alias.
type Device = engine.Device

// Tensor is a named type over an internal struct with unexported fields only.
type Tensor engine.Tensor

// Output embeds an internal type.
type Output struct{ engine.Part }
`
	if err := os.WriteFile(filepath.Join(dir, "api.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := problems(t, base, load(t, dir))
	if len(got) != 2 || !strings.HasPrefix(got[0], "Device: an alias") || !strings.HasPrefix(got[1], "Output: embeds") {
		t.Errorf("problems = %q, want the alias Device and the embedding Output", got)
	}
}
