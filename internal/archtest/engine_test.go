package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// engineClient is the Engine API client package: only internal/engine
// constructs a client from it.
const engineClient = "github.com/moby/moby/client"

// engineLabels are the labels internal/engine owns, by their constant there:
// no other package spells them.
var engineLabels = map[string]string{
	"vak.managed":   "LabelManaged",
	"vak.kind":      "LabelKind",
	"vak.run":       "LabelRunID",
	"vak.workspace": "LabelWorkspace",
	"vak.owner":     "LabelOwner",
	"vak.owner.pid": "LabelOwnerProc",
}

// noEngineClientImport are directories whose non-test files may not import
// the Engine API client package at all: they get the client type
// (engine.Client) and everything else they need from internal/engine.
var noEngineClientImport = []string{"internal/cli"}

// plumbingViolations checks one Go file (path relative to the module root)
// against internal/engine's ownership of the Docker plumbing: only engine
// constructs an Engine API client (client.New, client.FromEnv, in tests
// too), only engine's non-test files spell vak's shared labels, and the
// packages of noEngineClientImport do not import the client package.
func plumbingViolations(path string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	inEngine := strings.HasPrefix(path, "internal/engine/")
	test := strings.HasSuffix(path, "_test.go")
	var out []string
	clientName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == engineClient {
			clientName = "client"
			if imp.Name != nil {
				clientName = imp.Name.Name
			}
			if !test && slices.ContainsFunc(noEngineClientImport, func(d string) bool { return filepath.Dir(path) == d }) {
				out = append(out, path+": imports "+engineClient+": use internal/engine (engine.Client, engine.New, engine.APIError)")
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && !inEngine && clientName != "" && id.Name == clientName && (n.Sel.Name == "New" || n.Sel.Name == "FromEnv" || n.Sel.Name == "NewClientWithOpts") {
				out = append(out, path+": constructs an Engine API client ("+clientName+"."+n.Sel.Name+"): use engine.New")
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING || inEngine || test {
				return true
			}
			v, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			key, _, _ := strings.Cut(v, "=")
			if c, ok := engineLabels[key]; ok {
				out = append(out, path+": spells the label "+key+": use engine."+c)
			}
		}
		return true
	})
	return out, nil
}

// TestEnginePlumbing checks every Go file of the module (outside testdata
// and third_party, which are not vak's packages) with plumbingViolations.
func TestEnginePlumbing(t *testing.T) {
	root := "../.."
	checked := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "third_party" || strings.HasPrefix(n, ".") && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		vs, err := plumbingViolations(filepath.ToSlash(rel), src)
		if err != nil {
			return err
		}
		for _, v := range vs {
			t.Error(v)
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 200 {
		t.Fatalf("checked only %d Go files", checked)
	}
}

// TestEnginePlumbingRules shows that the check finds each thing it forbids,
// and allows the same code in internal/engine.
func TestEnginePlumbingRules(t *testing.T) {
	const construct = "package p\nimport c \"github.com/moby/moby/client\"\nfunc f() { c.New(c.FromEnv) }\n"
	const label = "package p\nconst l = \"vak.workspace\"\nvar f = \"vak.owner.pid=\" + l\n"
	const passes = "package p\nimport \"github.com/moby/moby/client\"\nfunc f(x *client.Client) { _ = \"vak.proxynet\" }\n"
	tests := []struct {
		name, path, src string
		want            []string // substrings, one per violation
	}{
		{"a package constructs a client", "internal/dockerd/x.go", construct,
			[]string{"(c.New): use engine.New", "(c.FromEnv): use engine.New"}},
		{"a test constructs a client", "internal/dockerd/x_test.go", construct,
			[]string{"(c.New)", "(c.FromEnv)"}},
		{"engine constructs a client", "internal/engine/x.go", construct, nil},
		{"a package spells labels", "internal/proxynet/x.go", label,
			[]string{"vak.workspace: use engine.LabelWorkspace", "vak.owner.pid: use engine.LabelOwnerProc"}},
		{"engine spells labels", "internal/engine/x.go", label, nil},
		{"a test spells labels", "internal/cli/x_test.go", label, nil},
		{"cli imports the client package", "internal/cli/x.go", passes,
			[]string{"internal/cli/x.go: imports github.com/moby/moby/client"}},
		{"a test of cli imports the client package", "internal/cli/x_test.go", passes, nil},
		{"taskenv imports it and names its own label", "internal/taskenv/x.go", passes, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := plumbingViolations(tc.path, []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("violations = %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d = %q, want it to name %q", i, got[i], w)
				}
			}
		})
	}
}
