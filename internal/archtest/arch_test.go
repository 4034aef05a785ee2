package archtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A rule forbids packages matching From to depend, directly or through
// others, on packages matching any of Forbid. A pattern matches a package
// and everything below it; Except exempts packages (and what is below them)
// that From matches, Allow dependencies that Forbid matches.
type rule struct {
	From   string
	Forbid []string
	Except []string
	Allow  []string
	Why    string
}

// backends are the concrete sandbox backends: only the start sequence
// (internal/launch; cli only through it, importRules), vak doctor's
// report (internal/doctor), the benchmarks and the backends' own tests may import
// them.
var backends = []string{
	"vak/internal/sandbox/landlock",
	"vak/internal/sandbox/seatbelt",
	"vak/internal/sandbox/docker",
	"vak/internal/sandbox/none",
}

// rules are vak's layering. Adding a backend is one package plus one
// registration line in internal/launch; nothing below it may learn its name.
var rules = append([]rule{
	{From: "vak/internal/broker", Forbid: backends,
		Why: "the broker reaches backends only through the sandbox seam (ProcessBackend, Wrapper, the worker-entry registry)"},
	{From: "vak/internal/worker", Forbid: backends,
		Why: "the worker carries backend data opaquely; backends register their own worker entry points"},
	{From: "vak/internal/worker/wire", Forbid: []string{"vak"},
		Why: "the wire types and client are what embedders import: no vak dependencies"},
	{From: "vak/internal/mcp", Forbid: []string{"vak/internal/cli", "vak/internal/sandbox/landlock", "vak/internal/sandbox/seatbelt", "vak/internal/sandbox/none"},
		Why: "the MCP server is told its workspace, mode and how to start a worker; the composition root (cli) picks the backend (docker is reached only through taskenv's sessions)"},
	{From: "vak/internal/errclass", Forbid: []string{"vak"},
		Why: "every package may declare classed sentinels: errclass depends on nothing"},
	{From: "vak/internal/sandbox", Forbid: backends, Except: []string{"vak/internal/sandbox/landlock", "vak/internal/sandbox/seatbelt", "vak/internal/sandbox/docker", "vak/internal/sandbox/none", "vak/internal/sandbox/sandboxtest"},
		Why: "the seam knows no backend; backends know the seam"},
	{From: "vak/internal/sandbox/docker", Forbid: []string{"vak/internal/worker", "vak/internal/taskenv"},
		Why: "the per-command wrap is only a docker run argv; task environments and the worker live elsewhere"},
	{From: "vak/internal/sandbox", Forbid: []string{"vak/internal/broker", "vak/internal/cli", "vak/internal/config"}, Except: []string{"vak/internal/sandbox/sandboxtest"},
		Why: "the seam and the backends are told what to do (policy values), they do not read config or call the broker"},
	{From: "vak/internal/egress", Forbid: []string{"vak/internal/sandbox"},
		Why: "the gateway runs outside every sandbox and knows nothing of them"},
	{From: "vak/internal/proxynet", Forbid: []string{"vak/internal/egress/gateway", "vak/internal/egress/proxy", "vak/internal/egress/dns", "vak/internal/egress/secrets/stream"},
		Why: "the topology starts the gateway as a container; it does not link its data plane"},
	{From: "vak/internal/config", Forbid: append([]string{"vak/internal/broker", "vak/internal/cli", "vak/internal/worker"}, backends...),
		Why: "config is decoded and validated before anything runs"},
	{From: "vak/internal/engine", Forbid: []string{"vak"}, Allow: []string{"vak/internal/errclass"},
		Why: "engine is the low Docker plumbing every Docker user imports (client, access check, labels, exec): it depends on no other vak package"},
	{From: "vak/internal/proxynet", Forbid: []string{"vak/internal/taskenv"},
		Why: "the topology is below sessions: its binary check and exec helper come from engine"},
	{From: "vak/internal/kubesession", Forbid: append([]string{"vak/internal/taskenv", "vak/internal/proxynet", "vak/internal/dockerd", "vak/internal/launch", "vak/internal/cli"}, backends...),
		Why: "the kubernetes session backend is a sibling of Docker sessions: it shares the worker and its protocol, not the Docker code; launch registers it"},
	{From: "vak/internal/leanstage", Forbid: heavy, Allow: []string{"vak/internal/egress/origdst", "vak/internal/egress/proxyproto"},
		Why: "the lean stage program starts twice for every sandboxed run, and Go initialises every package a program links at each start: it links the stages, the worker and the fence, nothing else"},
	{From: "vak/internal/leanstage", Forbid: backends, Except: []string{"vak/internal/leanstage/entry", "vak/internal/leanstage/program"},
		Why: "the landlock backend imports leanstage, which must therefore know no backend; the stages' registration is entry's"},
}, dockerUserRules()...)

// heavy are what the lean stage program must not link: vak's command line
// and start sequence, the Docker, Kubernetes and MCP clients, HTTP.
var heavy = []string{
	"vak/internal/cli", "vak/internal/launch", "vak/internal/broker", "vak/internal/config",
	"vak/internal/egress", "vak/internal/taskenv", "vak/internal/kubesession", "vak/internal/engine",
	"k8s.io", "sigs.k8s.io", "github.com/moby", "github.com/docker", "github.com/modelcontextprotocol",
	"go.opentelemetry.io", "github.com/spf13/cobra", "net/http",
}

// dockerUsers are the packages that drive Docker but are not the docker
// backend: their labels, sentinels and access check come from engine, not
// from the backend.
var dockerUsers = []string{"vak/internal/proxynet", "vak/internal/devcontainer", "vak/internal/dockerd", "vak/internal/dockerguard", "vak/internal/engine"}

// dockerUserRules forbid dockerUsers the docker backend.
func dockerUserRules() []rule {
	var rs []rule
	for _, p := range dockerUsers {
		rs = append(rs, rule{From: p, Forbid: []string{"vak/internal/sandbox/docker"},
			Why: "Docker plumbing (labels, ErrDaemonUnavailable, the access check) comes from internal/engine; the docker backend is a wrapper only the start sequence registers"})
	}
	return rs
}

// importRules are rules on direct imports only (a package may still reach
// the forbidden one through the package that owns it).
var importRules = []rule{
	{From: "vak/internal/cli", Forbid: []string{"vak/internal/sandbox/landlock", "vak/internal/sandbox/seatbelt", "vak/internal/sandbox/none"},
		Why: "the start sequence (internal/launch) registers and resolves the backends; the command line is flags and printing"},
	{From: "vak/internal/doctor", Forbid: []string{"vak/internal/sandbox/landlock", "vak/internal/sandbox/seatbelt", "vak/internal/sandbox/none"},
		Why: "the doctor reports on the backends launch registers and resolves (the docker backend only for the container's home path)"},
}

// matches reports whether pkg is pattern or below it.
func matches(pattern, pkg string) bool {
	return pkg == pattern || strings.HasPrefix(pkg, pattern+"/")
}

// violations returns every (package, dependency) pair of deps that a rule
// forbids, one message each, sorted.
func violations(rules []rule, deps map[string][]string) []string {
	var out []string
	for pkg, ds := range deps {
		for _, r := range rules {
			if !matches(r.From, pkg) || slices.ContainsFunc(r.Except, func(e string) bool { return matches(e, pkg) }) {
				continue
			}
			for _, d := range ds {
				if slices.ContainsFunc(r.Allow, func(a string) bool { return matches(a, d) }) {
					continue
				}
				for _, f := range r.Forbid {
					if matches(f, d) {
						out = append(out, fmt.Sprintf("%s depends on %s: %s", pkg, d, r.Why))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

type goPackage struct {
	ImportPath string
	Doc        string
	Deps       []string
	Imports    []string
	GoFiles    []string
	Dir        string
}

// goList runs `go list -deps`-style queries for the module's packages, for
// goos (the darwin build has its own files).
func goList(t *testing.T, goos string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Doc,Deps,Imports,GoFiles,Dir", "vak/...")
	cmd.Env = append(cmd.Environ(), "GOOS="+goos)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// TestLayering checks the real dependency graph, for Linux and for macOS,
// against the rules.
func TestLayering(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			deps, imports := map[string][]string{}, map[string][]string{}
			for _, p := range goList(t, goos) {
				deps[p.ImportPath] = p.Deps
				imports[p.ImportPath] = p.Imports
			}
			// The rules must name packages that exist, or they guard nothing.
			for _, r := range append(slices.Clone(rules), importRules...) {
				found := false
				for p := range deps {
					found = found || matches(r.From, p)
				}
				if !found {
					t.Errorf("rule for %s: no such package", r.From)
				}
			}
			for _, v := range violations(rules, deps) {
				t.Error(v)
			}
			for _, v := range violations(importRules, imports) {
				t.Error("import: " + v)
			}
		})
	}
}

// TestLayeringRules shows that the check fails when a forbidden import is
// added: each case is a dependency graph with one edge the rules forbid (or
// allow), and the expected verdict.
func TestLayeringRules(t *testing.T) {
	tests := []struct {
		name string
		deps map[string][]string
		want []string // substrings, one per violation
	}{
		{"broker imports the docker backend",
			map[string][]string{"vak/internal/broker": {"vak/internal/sandbox", "vak/internal/sandbox/docker"}},
			[]string{"vak/internal/broker depends on vak/internal/sandbox/docker"}},
		{"broker imports landlock through another package",
			map[string][]string{"vak/internal/broker": {"vak/internal/config", "vak/internal/sandbox/landlock"}},
			[]string{"vak/internal/broker depends on vak/internal/sandbox/landlock"}},
		{"worker imports landlock",
			map[string][]string{"vak/internal/worker": {"vak/internal/sandbox/landlock"}},
			[]string{"vak/internal/worker depends on vak/internal/sandbox/landlock"}},
		{"wire imports any vak package",
			map[string][]string{"vak/internal/worker/wire": {"encoding/json", "vak/internal/paths"}},
			[]string{"vak/internal/worker/wire depends on vak/internal/paths"}},
		{"the seam imports a backend",
			map[string][]string{"vak/internal/sandbox": {"vak/internal/sandbox/seatbelt"}},
			[]string{"vak/internal/sandbox depends on vak/internal/sandbox/seatbelt"}},
		{"an egress package imports the sandbox",
			map[string][]string{"vak/internal/egress/proxy": {"vak/internal/sandbox"}},
			[]string{"vak/internal/egress/proxy depends on vak/internal/sandbox"}},
		{"proxynet imports the gateway data plane",
			map[string][]string{"vak/internal/proxynet": {"vak/internal/egress/gateway"}},
			[]string{"vak/internal/proxynet depends on vak/internal/egress/gateway"}},
		{"the docker wrap imports the worker",
			map[string][]string{"vak/internal/sandbox/docker": {"vak/internal/worker/wire", "vak/internal/worker"}},
			[]string{"vak/internal/sandbox/docker depends on vak/internal/worker/wire", "vak/internal/sandbox/docker depends on vak/internal/worker:"}},
		{"a backend reads config",
			map[string][]string{"vak/internal/sandbox/landlock": {"vak/internal/config"}},
			[]string{"vak/internal/sandbox/landlock depends on vak/internal/config"}},
		{"allowed: the conformance suite drives the broker",
			map[string][]string{"vak/internal/sandbox/sandboxtest": {"vak/internal/broker", "vak/internal/config"}}, nil},
		{"allowed: the seam and the wire package",
			map[string][]string{
				"vak/internal/broker":      {"vak/internal/sandbox", "vak/internal/worker", "vak/internal/worker/wire"},
				"vak/internal/worker/wire": {"encoding/json"},
				"vak/internal/proxynet":    {"vak/internal/egress/egressconfig", "vak/internal/engine"},
			}, nil},
		{"engine imports another vak package",
			map[string][]string{"vak/internal/engine": {"vak/internal/errclass", "vak/internal/paths"}},
			[]string{"vak/internal/engine depends on vak/internal/paths"}},
		{"proxynet imports taskenv",
			map[string][]string{"vak/internal/proxynet": {"vak/internal/engine", "vak/internal/taskenv"}},
			[]string{"vak/internal/proxynet depends on vak/internal/taskenv"}},
		{"devcontainer takes labels from the docker backend",
			map[string][]string{"vak/internal/devcontainer": {"vak/internal/sandbox/docker"}},
			[]string{"vak/internal/devcontainer depends on vak/internal/sandbox/docker"}},
		{"allowed: engine imports errclass, taskenv imports engine and the backend",
			map[string][]string{
				"vak/internal/engine":  {"vak/internal/errclass", "github.com/moby/moby/client"},
				"vak/internal/taskenv": {"vak/internal/engine", "vak/internal/sandbox/docker"},
			}, nil},
		{"allowed: the start sequence imports every backend",
			map[string][]string{"vak/internal/launch": backends, "vak/internal/cli": {"vak/internal/launch", "vak/internal/sandbox/landlock"}}, nil},
		{"the lean stage program links HTTP and the Kubernetes client",
			map[string][]string{"vak/internal/leanstage/program": {"vak/internal/leanstage/entry", "net/http", "k8s.io/client-go/rest"}},
			[]string{"vak/internal/leanstage/program depends on k8s.io/client-go/rest", "vak/internal/leanstage/program depends on net/http"}},
		{"leanstage (imported by the landlock backend) imports landlock",
			map[string][]string{"vak/internal/leanstage": {"vak/internal/sandbox/landlock"}},
			[]string{"vak/internal/leanstage depends on vak/internal/sandbox/landlock"}},
		{"allowed: the lean program's entry registers landlock",
			map[string][]string{"vak/internal/leanstage/entry": {"vak/internal/sandbox/landlock", "vak/internal/netfence", "vak/internal/worker"}}, nil},
		{"allowed: a backend imports the seam",
			map[string][]string{"vak/internal/sandbox/landlock": {"vak/internal/sandbox"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := violations(rules, tc.deps)
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

// TestPackageDocs: every package has a doc comment (on every platform).
func TestPackageDocs(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		for _, p := range goList(t, goos) {
			if len(p.GoFiles) > 0 && strings.TrimSpace(p.Doc) == "" {
				t.Errorf("GOOS=%s: package %s has no doc comment", goos, p.ImportPath)
			}
		}
	}
}

// TestArchitectureMap: the package map in docs/ARCHITECTURE.md lists every
// package under internal/ and cmd/ that `go list ./...` finds, and nothing
// that does not exist unless it is marked (planned).
func TestArchitectureMap(t *testing.T) {
	data, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "## Layout")
	if i < 0 {
		t.Fatal("docs/ARCHITECTURE.md has no Layout section")
	}
	start := strings.Index(doc[i:], "```\n")
	end := strings.Index(doc[i+start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("the Layout section has no code block")
	}
	listed := map[string]bool{} // dir -> planned
	for _, line := range strings.Split(doc[i+start+4:i+start+4+end], "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasSuffix(f[0], "/") {
			continue
		}
		dir := strings.TrimSuffix(f[0], "/")
		if !strings.HasPrefix(dir, "internal/") && !strings.HasPrefix(dir, "cmd/") {
			continue // bench/, docs/, scripts/ stand for their trees
		}
		listed[dir] = len(f) > 1 && f[1] == "(planned)"
	}
	exists := map[string]bool{}
	for _, p := range goList(t, "linux") {
		dir := strings.TrimPrefix(p.ImportPath, "vak/")
		if !strings.HasPrefix(dir, "internal/") && !strings.HasPrefix(dir, "cmd/") {
			continue
		}
		exists[dir] = true
		if _, ok := listed[dir]; !ok {
			t.Errorf("docs/ARCHITECTURE.md does not list package %s/", dir)
		}
	}
	for dir, planned := range listed {
		switch {
		case planned && exists[dir]:
			t.Errorf("docs/ARCHITECTURE.md marks %s/ planned, but it exists", dir)
		case !planned && !exists[dir]:
			t.Errorf("docs/ARCHITECTURE.md lists %s/, which does not exist (mark it (planned))", dir)
		}
	}
}

// TestImportRules shows that the direct-import rules catch a direct import
// and let the owner's import through.
func TestImportRules(t *testing.T) {
	got := violations(importRules, map[string][]string{"vak/internal/cli": {"vak/internal/launch", "vak/internal/sandbox/landlock"}})
	if len(got) != 1 || !strings.Contains(got[0], "vak/internal/cli depends on vak/internal/sandbox/landlock") {
		t.Fatalf("cli importing landlock: violations = %q, want one", got)
	}
	if got := violations(importRules, map[string][]string{"vak/internal/cli": {"vak/internal/launch"}}); len(got) != 0 {
		t.Fatalf("cli importing launch: violations = %q, want none", got)
	}
}
