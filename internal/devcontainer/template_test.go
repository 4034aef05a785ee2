package devcontainer

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"

	"vak/internal/dockerd"
)

func testTemplate(t *testing.T) *Template {
	t.Helper()
	ws := t.TempDir()
	return &Template{Workspace: ws, Key: "a1b2c3d4e5f6", Image: "example/agent:1", Placeholders: map[string]string{"TOKEN": "vakph_x"}, GatewayNetworks: []string{"corp"}, Labels: map[string]string{"vak.test": "1"}, Vak: "/usr/local/bin/vak"}
}

func TestComposeHardening(t *testing.T) {
	tp := testTemplate(t)
	data, err := tp.Compose()
	if err != nil {
		t.Fatal(err)
	}
	body := data[strings.Index(string(data), "{"):]
	var p composeProject
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("compose.yml is not the JSON (YAML) it should be: %v", err)
	}
	app, gw, nc := p.Services["app"], p.Services["gateway"], p.Services["netclient"]
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"app joins the netclient", app.NetworkMode == "service:netclient" && len(app.Networks) == 0},
		{"app drops every capability", len(app.CapDrop) == 1 && app.CapDrop[0] == "ALL" && len(app.CapAdd) == 0},
		{"app has no-new-privileges", len(app.SecurityOpt) == 1 && app.SecurityOpt[0] == "no-new-privileges"},
		{"app waits for a healthy netclient", app.DependsOn["netclient"].Condition == "service_healthy"},
		{"app has its own long-running command", strings.Join(app.Command, " ") == "sleep infinity"},
		{"app gets placeholders, not values", strings.Contains(strings.Join(app.Environment, " "), "TOKEN=vakph_x")},
		{"app gets the trust variables", strings.Contains(strings.Join(app.Environment, " "), "SSL_CERT_FILE=")},
		{"app mounts the template dirs read-only", strings.Contains(strings.Join(app.Volumes, " "), filepath.Join(tp.Workspace, Dir)+":"+filepath.Join(tp.Workspace, Dir)+":ro") && strings.Contains(strings.Join(app.Volumes, " "), filepath.Join(tp.Workspace, VSCodeDir)+":"+filepath.Join(tp.Workspace, VSCodeDir)+":ro")},
		{"app never mounts the gateway volume", !strings.Contains(strings.Join(app.Volumes, " "), "vak-gateway")},
		{"gateway read-only, no capabilities", gw.ReadOnly && gw.CapDrop[0] == "ALL" && len(gw.CapAdd) == 0 && gw.Sysctls["net.ipv4.ip_forward"] == "0"},
		{"gateway at its fixed address", gw.Networks["sandbox"].IPv4Address == GatewayIP(tp.Key).String()},
		{"gateway joins the extra network", p.Networks["gateway-extra-0"].External && p.Networks["gateway-extra-0"].Name == "corp"},
		{"netclient only NET_ADMIN", len(nc.CapAdd) == 1 && nc.CapAdd[0] == "NET_ADMIN" && nc.ReadOnly},
		{"netclient names the gateway", strings.Contains(strings.Join(nc.Command, " "), "--gateway "+GatewayIP(tp.Key).String())},
		{"sandbox network internal, no host address", p.Networks["sandbox"].Internal && p.Networks["sandbox"].DriverOpts["com.docker.network.bridge.inhibit_ipv4"] == "true"},
		{"gateway address outside the dynamic range", !netip.MustParsePrefix(p.Networks["sandbox"].IPAM.Config[0].IPRange).Contains(GatewayIP(tp.Key)) && netip.MustParsePrefix(p.Networks["sandbox"].IPAM.Config[0].Subnet).Contains(GatewayIP(tp.Key))},
		{"volumes are the workspace's", p.Volumes["vak-gateway"].Name == GatewayVolume(tp.Key) && p.Volumes["vak-trust"].External},
		{"every service names runc, not the Engine's default runtime", app.Runtime == "runc" && gw.Runtime == "runc" && nc.Runtime == "runc"},
		{"labels on services and networks", app.Labels[LabelKey] == tp.Key && app.Labels["vak.test"] == "1" && p.Networks["sandbox"].Labels["vak.test"] == "1"},
	} {
		if !tc.ok {
			t.Errorf("%s: no\n%s", tc.name, data)
		}
	}
}

func TestExistingProtected(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	os.WriteFile(filepath.Join(ws, ".envrc"), nil, 0o644)
	os.Symlink("/etc", filepath.Join(ws, ".vak"))
	got, pinned := ExistingProtected(ws, []string{".git/hooks", ".git/config", ".envrc", ".vak", "../x", "/etc", ".vscode"})
	if strings.Join(got, ",") != ".git/hooks,.envrc" || strings.Join(pinned, ",") != ".git" {
		t.Errorf("ExistingProtected = %v, pinned %v", got, pinned)
	}
	tp := testTemplate(t)
	tp.Protected, tp.Pinned = got, pinned
	data, _ := tp.Compose()
	if !strings.Contains(string(data), filepath.Join(tp.Workspace, ".envrc")+":ro") {
		t.Errorf("protected path not mounted read-only:\n%s", data)
	}
	if g := filepath.Join(tp.Workspace, ".git"); !strings.Contains(string(data), `"`+g+":"+g+`"`) {
		t.Errorf(".git not pinned:\n%s", data)
	}
}

func TestDevcontainerJSON(t *testing.T) {
	tp := testTemplate(t)
	data, err := tp.DevcontainerJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	want := []any{"/usr/local/bin/vak", "devcontainer", "prepare", "--workspace", tp.Workspace, "--label", "vak.test=1"}
	got, _ := m["initializeCommand"].([]any)
	if len(got) != len(want) {
		t.Fatalf("initializeCommand = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("initializeCommand = %v", got)
		}
	}
	if m["service"] != "app" || m["overrideCommand"] != false || m["workspaceFolder"] != tp.Workspace {
		t.Errorf("devcontainer.json: %s", data)
	}
}

func TestWriteRefusesToOverwrite(t *testing.T) {
	tp := testTemplate(t)
	if _, err := tp.Write(false); err != nil {
		t.Fatal(err)
	}
	for _, d := range ProtectedDirs {
		if fi, err := os.Stat(filepath.Join(tp.Workspace, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", d, err)
		}
	}
	if _, err := tp.Write(false); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("second write: %v", err)
	}
	if _, err := tp.Write(true); err != nil {
		t.Errorf("--force: %v", err)
	}
}

func TestPlaceholdersPersist(t *testing.T) {
	state := t.TempDir()
	a, err := Placeholders(state, "k", []string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Placeholders(state, "k", []string{"B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	if a["B"] == "" || a["B"] != b["B"] || b["C"] == "" || b["C"] == b["B"] || len(b) != 2 {
		t.Errorf("placeholders: %v then %v", a, b)
	}
	if !strings.HasPrefix(a["A"], "vakph_") {
		t.Errorf("not a placeholder: %q", a["A"])
	}
	if fi, err := os.Stat(PlaceholderFile(state, "k")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("placeholder file: %v %v", fi, err)
	}
	for _, bad := range []string{"", "1A", "A-B", "A B", "A=B"} {
		if _, err := Placeholders(state, "k", []string{bad}); err == nil {
			t.Errorf("secret name %q accepted", bad)
		}
	}
}

func TestCheckTemplate(t *testing.T) {
	tp := testTemplate(t)
	if _, err := tp.Write(false); err != nil {
		t.Fatal(err)
	}
	if err := checkTemplate(tp.Workspace, tp.Placeholders); err != nil {
		t.Errorf("current template: %v", err)
	}
	err := checkTemplate(tp.Workspace, map[string]string{"TOKEN": "vakph_x", "NEW": "vakph_y"})
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "NEW") {
		t.Errorf("secret added after init: %v", err)
	}
	if err := checkTemplate(t.TempDir(), nil); err == nil {
		t.Errorf("no template: accepted")
	}
}

func TestStatusProblems(t *testing.T) {
	run := func(id string) *container.Summary { return &container.Summary{ID: id, State: container.StateRunning} }
	for _, tc := range []struct {
		name string
		st   Status
		want string
	}{
		{"healthy", Status{Services: map[string]*container.Summary{"gateway": run("g"), "netclient": run("n"), "app": run("a")}, Health: map[string]string{"gateway": "healthy", "netclient": "healthy"}}, ""},
		{"app absent", Status{Services: map[string]*container.Summary{"gateway": run("g"), "netclient": run("n")}, Health: map[string]string{}}, "app: no container"},
		{"netclient unhealthy", Status{Services: map[string]*container.Summary{"gateway": run("g"), "netclient": run("n"), "app": run("a")}, Health: map[string]string{"netclient": "unhealthy"}}, "netclient: health unhealthy"},
		{"stale app", Status{Services: map[string]*container.Summary{"gateway": run("g"), "netclient": run("n"), "app": run("a")}, Health: map[string]string{}, Stale: map[string]string{"app": "x"}}, "app: in a dead network namespace"},
		{"stale dockerd", Status{Docker: true, Services: map[string]*container.Summary{"gateway": run("g"), "netclient": run("n"), "dockerd": run("d"), "app": run("a")}, Health: map[string]string{}, Stale: map[string]string{"dockerd": "x"}}, "dockerd: in a dead network namespace"},
		{"dockerd absent", Status{Docker: true, Services: map[string]*container.Summary{"gateway": run("g"), "netclient": run("n"), "app": run("a")}, Health: map[string]string{}}, "dockerd: no container"},
		{"dockerd unhealthy", Status{Docker: true, Services: map[string]*container.Summary{"gateway": run("g"), "netclient": run("n"), "dockerd": run("d"), "app": run("a")}, Health: map[string]string{"dockerd": "unhealthy"}}, "dockerd: health unhealthy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(tc.st.Problems(), "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("problems = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestComposeDocker(t *testing.T) {
	tp := testTemplate(t)
	tp.Docker = true
	if _, err := tp.Compose(); err == nil {
		t.Fatal("a --docker template without the state dir was written")
	}
	tp.StateDir = filepath.Join(t.TempDir(), "state")
	data, err := tp.Compose()
	if err != nil {
		t.Fatal(err)
	}
	var p composeProject
	if err := json.Unmarshal(data[strings.Index(string(data), "{"):], &p); err != nil {
		t.Fatal(err)
	}
	d, app, nc := p.Services["dockerd"], p.Services["app"], p.Services["netclient"]
	if d == nil {
		t.Fatalf("no dockerd service:\n%s", data)
	}
	_, host, err := (dockerd.Sidecar{Name: "x", Image: "x", NetworkMode: "container:x", DataVolume: "x", Daemon: dockerd.Daemon{Pool: Pool, Gateway: GatewayIP(tp.Key)}, TrustCA: "/x"}).Spec()
	if err != nil {
		t.Fatal(err)
	}
	all := func(l []string) string { return strings.Join(l, " ") }
	mountsRaw := func(s *service) bool {
		for _, v := range append(s.Volumes, s.Tmpfs...) {
			if strings.Contains(v, dockerd.RawSocketDir) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"dockerd has exactly the sidecar's capabilities", all(d.CapDrop) == "ALL" && all(d.CapAdd) == all(host.CapAdd) && all(d.CapAdd) == all(dockerd.Capabilities)},
		{"dockerd's seccomp profile from the state dir", all(d.SecurityOpt) == "seccomp:"+SeccompFile(tp.StateDir, tp.Key)+" apparmor=unconfined" && !strings.HasPrefix(SeccompFile(tp.StateDir, tp.Key), tp.Workspace)},
		{"dockerd runs under the sidecar's runtime, named", d.Runtime == host.Runtime && d.Runtime != ""},
		{"dockerd's limits are the sidecar's", d.MemLimit == "4294967296" && d.PidsLimit == int(*host.PidsLimit)},
		{"dockerd creates its cgroup namespace", all(d.Entrypoint[:3]) == all(dockerd.UnshareCgroup) && strings.Contains(all(d.Command), "refusing to start")},
		{"no cgroup key (compose 1.29 rejects it; the entrypoint makes the namespace)", !strings.Contains(string(data), `"cgroup"`)},
		{"dockerd joins the netclient once healthy", d.NetworkMode == "service:netclient" && d.DependsOn["netclient"].Condition == "service_healthy"},
		{"dockerd's state on its named volume", strings.Contains(all(d.Volumes), DockerVolume(tp.Key)+":"+dockerd.DataDir) && p.Volumes[DockerVolume(tp.Key)].External},
		{"dockerd starts the guard", strings.Contains(all(d.Command), "'dockerguard' '--listen' '"+DockerSocket+"'") && strings.Contains(all(d.Command), "'--pool' '"+Pool.String()+"'")},
		{"dockerd's health check proves the namespace live", strings.Contains(all(d.Healthcheck.Test), "'--joined'") && strings.Contains(all(d.Healthcheck.Test), "unix://"+DockerSocket)},
		{"the raw socket only on dockerd's own tmpfs", mountsRaw(d) && !mountsRaw(app) && !mountsRaw(nc) && !mountsRaw(p.Services["gateway"])},
		{"the app has the guard's socket, not the binary or daemon state", strings.Contains(all(app.Volumes), SocketVolume(tp.Key)+":"+DockerDir+":ro") && !strings.Contains(all(app.Volumes), BinVolume(tp.Key)) && !strings.Contains(all(app.Volumes), DockerVolume(tp.Key))},
		{"only dockerd and the app share the socket volume", !strings.Contains(all(nc.Volumes)+all(p.Services["gateway"].Volumes), SocketVolume(tp.Key))},
		{"DOCKER_HOST in the app", strings.Contains(all(app.Environment), "DOCKER_HOST=unix://"+DockerSocket)},
		{"the app waits for a healthy dockerd", app.DependsOn["dockerd"].Condition == "service_healthy"},
		{"the app still drops everything", all(app.CapDrop) == "ALL" && len(app.CapAdd) == 0},
		{"the netclient in nested mode", strings.Contains(all(nc.Command), "--nested-pool "+Pool.String()) && strings.Contains(all(nc.Healthcheck.Test), "--nested-pool "+Pool.String())},
		{"no compose interpolation left", !strings.Contains(strings.ReplaceAll(string(data), "$$", ""), "$")},
	} {
		if !tc.ok {
			t.Errorf("%s: no\n%s", tc.name, data)
		}
	}
	cfg, _ := tp.DevcontainerJSON()
	if !strings.Contains(string(cfg), `"dockerd"`) {
		t.Errorf("devcontainer.json does not run dockerd: %s", cfg)
	}
}

// The agent's container runs as the workspace owner (Template.User) with a
// home of its own; a malformed user is refused; root's workspace keeps the
// image's user.
func TestComposeAppUser(t *testing.T) {
	app := func(tp *Template) *service {
		t.Helper()
		data, err := tp.Compose()
		if err != nil {
			t.Fatal(err)
		}
		var p composeProject
		if err := json.Unmarshal(data[strings.Index(string(data), "{"):], &p); err != nil {
			t.Fatal(err)
		}
		return p.Services["app"]
	}
	tp := testTemplate(t)
	if a := app(tp); a.User != "" || len(a.Tmpfs) != 0 || strings.Contains(strings.Join(a.Environment, " "), "HOME=") {
		t.Fatalf("no User: app runs as the image's user, got user %q tmpfs %v", a.User, a.Tmpfs)
	}
	tp.User = "1770:1771"
	a := app(tp)
	if a.User != "1770:1771" || len(a.Tmpfs) != 1 || a.Tmpfs[0] != AppHome+":uid=1770,gid=1771,mode=0700" {
		t.Fatalf("app user %q tmpfs %v", a.User, a.Tmpfs)
	}
	if !slicesContains(a.Environment, "HOME="+AppHome) {
		t.Fatalf("HOME not set to %s: %v", AppHome, a.Environment)
	}
	tp.Env = map[string]string{"HOME": "/work"}
	if a := app(tp); slicesContains(a.Environment, "HOME="+AppHome) || !slicesContains(a.Environment, "HOME=/work") {
		t.Fatalf("the user's HOME is kept: %v", a.Environment)
	}
	for _, bad := range []string{"1770", "vak:1", "1:2:3", ":1", "1:", "1; rm -rf /:0"} {
		tp.User = bad
		if _, err := tp.Compose(); err == nil {
			t.Errorf("user %q accepted", bad)
		}
	}
	// WorkspaceUser names the owner of a directory.
	if os.Getuid() == 0 {
		d := t.TempDir()
		if err := os.Chown(d, 1770, 1771); err != nil {
			t.Fatal(err)
		}
		if u, err := WorkspaceUser(d); err != nil || u != "1770:1771" {
			t.Fatalf("WorkspaceUser = %q, %v", u, err)
		}
		if u, err := WorkspaceUser(t.TempDir()); err != nil || u != "" {
			t.Fatalf("WorkspaceUser of root's dir = %q, %v", u, err)
		}
	}
}

func slicesContains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
