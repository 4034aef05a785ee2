package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"vak/internal/paths"
	"vak/internal/worker/wire"
)

// A Watcher holds the workspace against its baseline while nothing runs a
// command: what appears after the baseline is removed as soon as the
// kernel reports it (a nested repository, a protected path below an
// existing .git, .vscode, a .git link removed as the link with the
// directory it points to untouched), setuid bits are cleared, and each is
// reported. What the baseline holds stays (the repository's own .git, the
// user's .envrc, also when the user replaces it), and so does an ordinary
// file written with the plants (the positive control that the writes
// happened and the watcher removes only what it must).
func TestWatcherHoldsBaseline(t *testing.T) {
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	write := func(rel, data string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(ws, rel)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	write(".envrc", "export OWN=1\n")
	os.WriteFile(filepath.Join(target, "control"), []byte("keep\n"), 0o644)
	protected := []string{".git/hooks", ".git/config", ".vscode", ".envrc"}
	base := Snapshot(ws, protected)
	w, err := NewWatcher(ws, protected, base)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var mu sync.Mutex
	var got wire.BashResult
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, func(res *wire.BashResult, denied bool) {
			mu.Lock()
			defer mu.Unlock()
			got.ProtectedRemoved = append(got.ProtectedRemoved, res.ProtectedRemoved...)
			got.SetuidCleared = append(got.SetuidCleared, res.SetuidCleared...)
			got.TripwireWarnings = append(got.TripwireWarnings, res.TripwireWarnings...)
		})
	}()
	defer func() { cancel(); <-done }()

	// Each plant appears in one step (a rename from outside), as the
	// watcher may remove a directory before a second step could fill it.
	stage := t.TempDir()
	// plant makes rel: a file holding data, or (file set) a directory
	// holding file.
	plant := func(rel, file, data string) {
		t.Helper()
		src := filepath.Join(stage, rel)
		if file == "" {
			os.MkdirAll(filepath.Dir(src), 0o755)
			os.WriteFile(src, []byte(data), 0o644)
		} else {
			os.MkdirAll(src, 0o755)
			os.WriteFile(filepath.Join(src, file), []byte(data), 0o644)
		}
		dst := filepath.Join(ws, rel)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.Rename(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	plant(".git/config", "", "[core]\n\tfsmonitor = touch /tmp/never\n")
	plant("sub/.git", "config", "[core]\n")
	plant(".vscode", "tasks.json", "{}\n")
	os.MkdirAll(filepath.Join(ws, "lnk"), 0o755)
	if err := os.Symlink(target, filepath.Join(ws, "lnk", ".git")); err != nil {
		t.Fatal(err)
	}
	write("tool", "#!/bin/sh\n")
	if err := unix.Chmod(filepath.Join(ws, "tool"), 0o4755); err != nil {
		t.Fatalf("control: set the setuid bit: %v", err)
	}
	write("notes.txt", "ordinary\n")
	os.Remove(filepath.Join(ws, ".envrc"))
	write(".envrc", "export OWN=2\n")

	for _, rel := range []string{".git/config", "sub/.git", ".vscode", "lnk/.git"} {
		waitFor(t, rel+" to go", func() bool {
			_, err := os.Lstat(filepath.Join(ws, rel))
			return err != nil
		})
	}
	waitFor(t, "the setuid bit to go", func() bool {
		fi, err := os.Stat(filepath.Join(ws, "tool"))
		return err == nil && fi.Mode()&os.ModeSetuid == 0
	})
	waitFor(t, "the reports", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got.ProtectedRemoved) >= 4 && len(got.SetuidCleared) == 1
	})
	mu.Lock()
	slices.Sort(got.ProtectedRemoved)
	if want := []string{".git/config", ".vscode", "lnk/.git", "sub/.git"}; !slices.Equal(got.ProtectedRemoved, want) || !strings.HasPrefix(got.SetuidCleared[0], "tool ") || len(got.TripwireWarnings) > 0 {
		t.Errorf("reported %+v, want removed %q and tool cleared", got, want)
	}
	mu.Unlock()
	for rel, want := range map[string]string{".envrc": "export OWN=2\n", "notes.txt": "ordinary\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, rel)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", rel, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks")); err != nil {
		t.Errorf("the repository's own .git went: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "control")); err != nil || string(b) != "keep\n" {
		t.Errorf("the link's target was touched: %q %v", b, err)
	}
	if err := w.Err(); err != nil {
		t.Errorf("the watch gave up: %v", err)
	}
}

// A Watcher's baseline survives a round trip through JSON (the file a
// restarted session watcher reads); a state that was never recorded is
// refused, never taken as an empty baseline.
func TestTripwireStateJSON(t *testing.T) {
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(ws, "r", ".git"), 0o755)
	base := Snapshot(ws, []string{".vscode"})
	b, err := base.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back TripwireState
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if _, ok := back.st.git["r/.git"]; !ok || len(back.st.prot) != 1 {
		t.Fatalf("round trip lost entries: %+v", back.st)
	}
	if err := back.UnmarshalJSON([]byte(`{}`)); err == nil {
		t.Fatal("an empty state was accepted")
	}
	bad := Snapshot(filepath.Join(ws, "missing"), nil)
	if _, err := bad.MarshalJSON(); err == nil || bad.Err() == nil {
		t.Fatal("a state that could not be recorded was encoded")
	}
	if _, err := NewWatcher(ws, nil, bad); err == nil {
		t.Fatal("a watcher took a state that could not be recorded")
	}
}
