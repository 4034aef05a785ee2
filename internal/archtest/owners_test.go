package archtest

import (
	"errors"
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

// An owner rule says that only the package Owner (a directory below the
// module root) spells the string literals Literals in its code: one
// vocabulary per concept, owned by one low package, that the others
// import. A literal matches a name it equals or that it sets ("NAME=...").
// Tests and the test-support packages (internal/testenv and the
// packages whose name ends in "test") may spell them, to check them.
type ownerRule struct {
	Owner    string
	Literals []string
	// Selectors are qualified identifiers ("fsguard.PlanWorkspace") only
	// the owner may use: the one constructor of a concept others take as
	// data.
	Selectors []string
	Why       string
}

var ownerRules = []ownerRule{
	{Owner: "internal/hostenv",
		Literals: []string{"LC_ALL", "LANGUAGE", "COLORTERM", "NO_COLOR", "LOGNAME", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Why:      "the host environment allowlist and DefaultPath are hostenv's: every backend passes the same variables"},
	{Owner: "internal/catrust",
		Literals: []string{"NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "AWS_CA_BUNDLE",
			"vak-ca.pem", "ca-bundle.pem", "truststore.p12", "vak-public-trust", "/etc/vak/trust"},
		Why: "the trust files' names and the CA variables are catrust's: every backend points commands at the same files"},
	{Owner: "internal/netpolicy",
		Literals:  []string{"proxied"},
		Selectors: []string{"sandbox.ParseNetworkPolicy", "taskenv.ParseNetworkPolicy", "egressconfig.ModeNone", "egressconfig.ModeProxied"},
		Why:       "[network] policy has one type and one parser, netpolicy's: config, egressconfig, the seam and sessions use them"},
	{Owner: "internal/fsguard",
		Selectors: []string{"fsguard.PlanWorkspace", "fsguard.Abs"},
		Why:       "the protected-path plan is made once, by fsguard (PlanProtection, or ProtectionOf from the walk of the tripwire's baseline), and passed as a sandbox.Protection: no other package walks the workspace for it or converts its paths"},
}

// testSupport reports whether dir (slash-separated, below the module root)
// is a package that exists for tests.
func testSupport(dir string) bool {
	return strings.HasPrefix(dir, "internal/testenv") || strings.HasSuffix(dir, "test")
}

// inspectCode parses every non-test Go file below root/top for each top
// (skipping test-support packages and testdata) and calls visit with its
// directory (slash-separated, below root) for every node.
func inspectCode(t *testing.T, fset *token.FileSet, root string, tops []string, visit func(dir string, n ast.Node)) {
	t.Helper()
	for _, top := range tops {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && path == filepath.Join(root, top) {
				return filepath.SkipDir
			}
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			dir := filepath.ToSlash(filepath.Dir(rel))
			if testSupport(dir) || strings.Contains(dir, "/testdata") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				visit(dir, n)
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// ownerViolations returns, for the Go files below root, every string
// literal or selector of a rule used outside the rule's owner, one message
// each.
func ownerViolations(t *testing.T, root string, rules []ownerRule) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	inspectCode(t, fset, root, []string{"internal", "cmd"}, func(dir string, n ast.Node) {
		for _, r := range rules {
			if dir == r.Owner {
				continue
			}
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && slices.Contains(r.Selectors, x.Name+"."+n.Sel.Name) {
					out = append(out, fset.Position(n.Pos()).String()+": "+x.Name+"."+n.Sel.Name+" outside "+r.Owner+": "+r.Why)
				}
			case *ast.BasicLit:
				v, err := strconv.Unquote(n.Value)
				if n.Kind == token.STRING && err == nil && slices.ContainsFunc(r.Literals, func(l string) bool { return v == l || strings.HasPrefix(v, l+"=") }) {
					out = append(out, fset.Position(n.Pos()).String()+": "+strconv.Quote(v)+" outside "+r.Owner+": "+r.Why)
				}
			}
		}
	})
	return out
}

// TestOwners: each concept's names are spelled by its owner only.
func TestOwners(t *testing.T) {
	for _, v := range ownerViolations(t, "../..", ownerRules) {
		t.Error(v)
	}
}

// TestOwnerRules: the check finds a literal spelled outside its owner (a
// planted file) and accepts the owner's own.
func TestOwnerRules(t *testing.T) {
	root := t.TempDir()
	for path, src := range map[string]string{
		"internal/own/own.go":        "package own\n\nconst A = \"OWNED\"\n",
		"internal/other/other.go":    "package other\n\nvar b = []string{`OWNED`, \"OWNED=x\", \"OWNEDNOT\", own.Make(), own.Other()}\n",
		"internal/other/x_test.go":   "package other\n\nconst c = \"OWNED\"\n",
		"internal/footest/helper.go": "package footest\n\nconst d = \"OWNED\"\n",
	} {
		p := filepath.Join(root, path)
		if err := mkdirWrite(p, src); err != nil {
			t.Fatal(err)
		}
	}
	got := ownerViolations(t, root, []ownerRule{{Owner: "internal/own", Literals: []string{"OWNED"}, Selectors: []string{"own.Make"}, Why: "test"}})
	if len(got) != 3 || !strings.Contains(got[0], filepath.Join("internal", "other", "other.go")) || !strings.Contains(got[1], `"OWNED=x"`) || !strings.Contains(got[2], "own.Make outside") {
		t.Fatalf("violations %q, want exactly OWNED, OWNED=x and own.Make in internal/other/other.go", got)
	}
}

// mkdirWrite writes src to a new file at p, making its directory.
func mkdirWrite(p, src string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(src), 0o644)
}

// homeFieldPkgs hold the structs that carry a home to a backend: there the
// user's real home is a field UserHome and the agent's home AgentHome;
// the names that once meant one or the other (Home, HomeDir, HomeSource)
// are refused.
var homeFieldPkgs = []string{"internal/sandbox", "internal/broker", "internal/taskenv"}

// TestHomeNames: the two homes have two names in the packages that pass
// them on.
func TestHomeNames(t *testing.T) {
	fset := token.NewFileSet()
	inspectCode(t, fset, "../..", homeFieldPkgs, func(_ string, n ast.Node) {
		st, ok := n.(*ast.StructType)
		if !ok {
			return
		}
		for _, fl := range st.Fields.List {
			for _, name := range fl.Names {
				if slices.Contains([]string{"Home", "HomeDir", "HomeSource"}, name.Name) {
					t.Errorf("%s: field %s: name the home UserHome (the user's real home) or AgentHome (the agent's)", fset.Position(name.Pos()), name.Name)
				}
			}
		}
	})
}
