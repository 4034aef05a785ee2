package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A callRule allows calls of Func (package import path and function name)
// only from the non-test files named in In (module-relative paths).
type callRule struct {
	Pkg, Func string
	In        []string
	Why       string
}

// callRules make "once per start" structural: a start loads its config
// once, through the command's loader, and the config's loader is the only
// place that validates the egress sections of a start; everything after it
// (internal/launch, proxynet, the on-demand gateway's client) is handed the
// loaded config and the validated sections (egressconfig.Sections.Validated).
// A gateway process (`vak gateway`, the on-demand gateway) is not a start:
// it reloads through config.GatewayLoader, inside config.
var callRules = []callRule{
	{Pkg: "vak/internal/config", Func: "Load", In: []string{
		"internal/cli/root.go", // app.loadConfig: a command's one load
	}, Why: "a start loads its config once (cli's loadConfig) and passes it down"},
	{Pkg: "vak/internal/egress/egressconfig", Func: "Validate", In: []string{
		"internal/config/config.go",          // the loader: once per load
		"internal/config/gateway.go",         // a gateway process without a config file: the defaults
		"internal/egress/sandcat/sandcat.go", // checks an imported file before it is written
	}, Why: "the egress sections are validated once, by the config's loader; later steps use Sections.Validated"},
}

// calls returns, for each module-relative file of vak's packages under
// internal/ and cmd/, the calls it makes
// of the rules' functions, as "file: pkg.Func" (test files excluded: go list
// leaves them out of GoFiles).
func calls(t *testing.T, pkgs []goPackage, rules []callRule) []string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, "vak/internal/") && !strings.HasPrefix(p.ImportPath, "vak/cmd/") {
			continue // bench/ programs are their own roots
		}
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, path)
			out = append(out, fileCalls(f, filepath.ToSlash(rel), rules)...)
		}
	}
	return out
}

// fileCalls is calls for one parsed file named rel.
func fileCalls(f *ast.File, rel string, rules []callRule) []string {
	local := map[string]string{} // local import name -> import path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = path
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		for _, r := range rules {
			if local[id.Name] == r.Pkg && sel.Sel.Name == r.Func {
				out = append(out, fmt.Sprintf("%s: %s.%s", rel, r.Pkg, r.Func))
			}
		}
		return true
	})
	return out
}

// callViolations are the calls that no rule allows where they are made.
func callViolations(found []string, rules []callRule) []string {
	var out []string
	for _, c := range found {
		file, fn, _ := strings.Cut(c, ": ")
		for _, r := range rules {
			if fn == r.Pkg+"."+r.Func && !slices.Contains(r.In, file) {
				out = append(out, fmt.Sprintf("%s calls %s: %s", file, fn, r.Why))
			}
		}
	}
	return out
}

// TestConfigOncePerStart checks the real code against callRules, and that
// every allowed call still exists (or the rule allows too much).
func TestConfigOncePerStart(t *testing.T) {
	found := calls(t, goList(t, "linux"), callRules)
	for _, v := range callViolations(found, callRules) {
		t.Error(v)
	}
	for _, r := range callRules {
		for _, in := range r.In {
			if !slices.Contains(found, in+": "+r.Pkg+"."+r.Func) {
				t.Errorf("%s is allowed to call %s.%s but does not: remove it from callRules", in, r.Pkg, r.Func)
			}
		}
	}
}

// TestCallRules shows that a call outside the allowed files is caught,
// under any import name, and an allowed one is not.
func TestCallRules(t *testing.T) {
	src := `package proxynet
import eg "vak/internal/egress/egressconfig"
func f() { eg.Validate("f", nil) }
`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := fileCalls(f, "internal/proxynet/topology.go", callRules)
	got := callViolations(found, callRules)
	if len(got) != 1 || !strings.Contains(got[0], "internal/proxynet/topology.go calls vak/internal/egress/egressconfig.Validate") {
		t.Fatalf("violations = %q, want one for proxynet", got)
	}
	if got := callViolations(fileCalls(f, "internal/config/config.go", callRules), callRules); len(got) != 0 {
		t.Fatalf("the loader's call: violations = %q, want none", got)
	}
}
