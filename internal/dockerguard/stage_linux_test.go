package dockerguard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The symlink-swap race between the bind-source check and the engine's
// mount: with a stage dir, what the engine is told to mount is a bind of
// the object the guard opened beneath the workspace, so swapping the
// checked directory for a symlink afterwards changes nothing (control: the
// original path now leads to /). Escapes through symlinks are refused,
// missing Binds sources are created beneath the workspace only, and the
// staged bind is recursive (a read-only submount stays read-only).
func TestStageBind(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("staging bind mounts needs root (CAP_SYS_ADMIN), as in the sidecar")
	}
	stage := filepath.Join(t.TempDir(), "stage")
	e := setupPolicy(t, func(_ string, p *Policy) { p.StageDir = stage })
	t.Cleanup(func() {
		ents, _ := os.ReadDir(stage)
		for _, en := range ents {
			unix.Unmount(filepath.Join(stage, en.Name()), unix.MNT_DETACH)
		}
	})
	ws := e.ws
	sub := filepath.Join(ws, "sub")
	os.MkdirAll(filepath.Join(sub, "prot"), 0o755)
	os.WriteFile(filepath.Join(sub, "marker"), []byte("inside"), 0o644)
	// A read-only submount, as the session's protected paths are.
	prot := filepath.Join(sub, "prot")
	if err := unix.Mount(prot, prot, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(ws, "sub.old", "prot"), unix.MNT_DETACH) }) // renamed below
	if err := unix.Mount("", prot, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	// Direct calls use names of their own in the same stage dir.
	g := &Guard{p: Policy{Workspace: ws, StageDir: stage}, stage: newStageState()}
	g.stage.n.Store(1000)

	// Through the API: the forwarded bind names the staged path.
	_, msg, fwd := e.do(t, e.client, "POST", "/v1.41/containers/create", create(`"Binds":["`+sub+`:/x"]`))
	if fwd == nil {
		t.Fatalf("create with a workspace bind: %s", msg)
	}
	var got struct{ HostConfig struct{ Binds []string } }
	json.Unmarshal(fwd.Body, &got)
	if len(got.HostConfig.Binds) == 0 || !strings.HasPrefix(got.HostConfig.Binds[0], stage+"/") {
		t.Fatalf("forwarded binds %v, want a source under %s", got.HostConfig.Binds, stage)
	}
	staged := strings.Split(got.HostConfig.Binds[0], ":")[0]

	// The race: swap the checked directory for a symlink to /.
	if err := os.Rename(sub, filepath.Join(ws, "sub.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", sub); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sub, "proc", "self")); err != nil {
		t.Fatalf("control: the swapped path does not lead to /: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(staged, "marker")); err != nil || string(b) != "inside" {
		t.Errorf("the staged bind does not hold the checked directory after the swap: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(staged, "proc")); err == nil {
		t.Errorf("the staged bind leads to / after the swap")
	}
	// Recursive: the read-only submount stays read-only in the stage
	// (control: the checked directory itself is writable).
	if err := os.WriteFile(filepath.Join(staged, "prot", "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write under the read-only submount through the stage: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(staged, "w"), nil, 0o644); err != nil {
		t.Errorf("control: write in the staged directory: %v", err)
	}

	var rnd [6]byte
	rand.Read(rnd[:])
	outside := "/tmp/vaktest-stage-" + hex.EncodeToString(rnd[:])
	os.Symlink("../..", filepath.Join(ws, "up"))
	os.Symlink("sub.old", filepath.Join(ws, "in"))
	for _, tc := range []struct {
		src    string
		create bool
		deny   string // "" = allowed
	}{
		{sub, true, "through a symlink"},                                                  // now a symlink to /
		{filepath.Join(ws, "up"), true, "through a symlink"},                              // relative, leads above
		{filepath.Join(sub, strings.TrimPrefix(outside, "/")), true, "through a symlink"}, // must not create outside
		{filepath.Join(ws, "in"), false, ""},                                              // a symlink within: fine
		{filepath.Join(ws, "new", "dir"), true, ""},                                       // created beneath
		{filepath.Join(ws, "missing"), false, "does not exist"},                           // Mounts: not created
	} {
		p := g.reserve(context.Background())
		err := g.stageBind(p, tc.src, tc.create, "HostConfig.Binds")
		var d *Denied
		switch {
		case tc.deny == "" && err != nil:
			t.Errorf("%s: %v", tc.src, err)
		case tc.deny != "" && (!errors.As(err, &d) || !strings.Contains(err.Error(), tc.deny) || !strings.Contains(err.Error(), "HostConfig.Binds")):
			t.Errorf("%s: %v (%s), want a denial %q", tc.src, err, p, tc.deny)
		}
	}
	// A file source is staged as a file.
	os.WriteFile(filepath.Join(ws, "conf.json"), []byte("{}"), 0o644)
	if p := g.reserve(context.Background()); g.stageBind(p, filepath.Join(ws, "conf.json"), true, "HostConfig.Binds") != nil {
		t.Errorf("a file source was not staged")
	} else if b, err := os.ReadFile(p); err != nil || string(b) != "{}" {
		t.Errorf("the staged file source reads %q, %v", b, err)
	}
	if _, err := os.Stat(outside); err == nil {
		os.RemoveAll(outside)
		t.Errorf("staging created %s outside the workspace", outside)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "new", "dir")); err != nil || !fi.IsDir() {
		t.Errorf("a missing Binds source was not created in the workspace: %v", err)
	}
}

// fakeEngine answers what the guard asks during creates with staging: it
// keeps the containers it created (with their bind sources) until they
// are deleted, lists them, and refuses creates named "refused".
type fakeEngine struct {
	mu   sync.Mutex
	n    int
	live map[string][]string // id -> bind sources
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/containers/create"):
		if r.URL.Query().Get("name") == "refused" {
			http.Error(w, `{"message":"no such image"}`, http.StatusNotFound)
			return
		}
		var c struct{ HostConfig struct{ Binds []string } }
		json.NewDecoder(r.Body).Decode(&c)
		f.n++
		id := fmt.Sprintf("c%d", f.n)
		for _, b := range c.HostConfig.Binds {
			f.live[id] = append(f.live[id], strings.Split(b, ":")[0])
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"Id":%q}`, id)
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/containers/json"):
		type m struct{ Source string }
		var list []map[string][]m
		for _, srcs := range f.live {
			var ms []m
			for _, s := range srcs {
				ms = append(ms, m{s})
			}
			list = append(list, map[string][]m{"Mounts": ms})
		}
		json.NewEncoder(w).Encode(list)
	case r.Method == "DELETE":
		delete(f.live, path.Base(r.URL.Path))
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// Staged sources do not pile up: a create sweeps those no container uses
// and no request in flight holds (a deleted container's, an engine-refused
// create's), keeps those of existing containers, and a create the guard
// refuses after staging removes what it staged at once.
func TestStageSweep(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("staging bind mounts needs root (CAP_SYS_ADMIN), as in the sidecar")
	}
	dir := t.TempDir()
	ws, trust, stage := filepath.Join(dir, "ws"), filepath.Join(dir, "trust"), filepath.Join(dir, "stage")
	for _, d := range []string{"a", "b", "c", "d", "e"} {
		os.MkdirAll(filepath.Join(ws, d), 0o755)
	}
	os.MkdirAll(trust, 0o755)
	raw, sock := filepath.Join(dir, "raw.sock"), filepath.Join(dir, "guard.sock")
	serve(t, &fakeEngine{live: map[string][]string{}}, raw)
	g, err := New(Policy{Workspace: ws, TrustDir: trust, Pool: netip.MustParsePrefix("10.213.0.0/16"), DNS: netip.MustParseAddr("10.0.0.1"), StageDir: stage}, raw)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, g, sock)
	t.Cleanup(func() {
		ents, _ := os.ReadDir(stage)
		for _, en := range ents {
			unix.Unmount(filepath.Join(stage, en.Name()), unix.MNT_DETACH)
		}
	})
	c := unixClient(sock)
	create := func(name, host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://docker/v1.41/containers/create?name="+name, strings.NewReader(create(host)))
		req.Header.Set("Content-Type", "application/json")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Id, Message string }
		json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		return res.StatusCode, out.Id + out.Message
	}
	bind := func(d string) string { return `"Binds":["` + filepath.Join(ws, d) + `:/x"]` }
	staged := func() int {
		ents, _ := os.ReadDir(stage)
		return len(ents)
	}
	if code, msg := create("a", bind("a")); code != 201 {
		t.Fatalf("create a: %d %s", code, msg)
	}
	idA := "c1"
	if code, _ := create("b", bind("b")); code != 201 || staged() != 2 {
		t.Fatalf("create b: %d, %d staged (want 2: a's container exists)", code, staged())
	}
	req, _ := http.NewRequest("DELETE", "http://docker/v1.41/containers/"+idA, nil)
	if res, err := c.Do(req); err != nil || res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete a: %v %v", res, err)
	}
	if code, _ := create("c", bind("c")); code != 201 || staged() != 2 {
		t.Errorf("create c after a's container went: %d staged, want 2 (b, c)", staged())
	}
	// Refused by the guard after a bind was staged: removed at once.
	if code, msg := create("d", bind("d")+`,"Mounts":[{"Type":"npipe","Source":"x","Target":"/y"}]`); code != 403 || staged() != 2 {
		t.Errorf("a create refused after staging: %d %s, %d staged (want 2)", code, msg, staged())
	}
	// Refused by the engine: kept while in flight, swept by the next create.
	if code, _ := create("refused", bind("e")); code != 404 || staged() != 3 {
		t.Errorf("an engine-refused create: %d, %d staged (want 3 until the next sweep)", code, staged())
	}
	if code, _ := create("f", bind("a")); code != 201 || staged() != 3 {
		t.Errorf("the next create did not sweep the refused one's source: %d staged, want 3 (b, c, f)", staged())
	}
	if b, err := os.ReadDir(filepath.Join(stage, "b2")); err != nil {
		t.Errorf("b's staged source (its container exists) was swept: %v %v", b, err)
	}
}
