package seatbelt

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"vak/internal/sandbox"
)

func TestCanonicalize(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(base, "real")
	if err := os.MkdirAll(filepath.Join(real, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link") // like /tmp -> /private/tmp
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	p := Policy{
		Workspace:  link + "/ws/",
		Mode:       sandbox.WorkspaceWrite,
		TempDir:    link + "/not/yet/there",
		UserHome:   base + "/home",
		ReadPaths:  []string{link + "/ws/../ro"},
		WritePaths: []string{"relative/is/left"},
		Protected:  []string{".git/hooks"},
		Deny:       []string{link + "/state"},
		AgentHome:  link + "/homes/w",
		Proxy:      &Proxy{Port: 1, TrustDir: link + "/trust/"},
	}
	got, err := Canonicalize(p)
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{
		Workspace:  real + "/ws",
		Mode:       sandbox.WorkspaceWrite,
		TempDir:    real + "/not/yet/there",
		UserHome:   base + "/home",
		ReadPaths:  []string{real + "/ro"},
		WritePaths: []string{"relative/is/left"},
		Protected:  []string{".git/hooks"},
		Deny:       []string{real + "/state", link + "/state"},
	}
	if got.Workspace != want.Workspace || got.TempDir != want.TempDir || got.UserHome != want.UserHome ||
		!slices.Equal(got.ReadPaths, want.ReadPaths) || !slices.Equal(got.WritePaths, want.WritePaths) ||
		!slices.Equal(got.Protected, want.Protected) || !slices.Equal(got.Deny, want.Deny) {
		t.Fatalf("Canonicalize =\n%+v\nwant\n%+v", got, want)
	}
	if got.AgentHome != real+"/homes/w" || got.Proxy.TrustDir != real+"/trust" {
		t.Errorf("Canonicalize: AgentHome %q, Proxy.TrustDir %q", got.AgentHome, got.Proxy.TrustDir)
	}
	if p.Proxy.TrustDir != link+"/trust/" {
		t.Fatal("Canonicalize modified its argument's Proxy")
	}
	if p.ReadPaths[0] != link+"/ws/../ro" {
		t.Fatal("Canonicalize modified its argument's slices")
	}
	// The result is what Profile wants, except the relative path it rejects.
	got.WritePaths = nil
	if _, err := Profile(got); err != nil {
		t.Fatalf("Profile(Canonicalize(p)): %v", err)
	}
}

func TestCanonicalizeError(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Canonicalize(Policy{Workspace: file + "/under-a-file"})
	if err == nil {
		t.Fatal("Canonicalize accepted a path under a regular file")
	}
}
