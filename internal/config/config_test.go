package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"vak/internal/sandbox"
)

func write(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	// The default user config may be absent.
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	cfg, err := Load(Options{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	if s.Backend != sandbox.Auto || s.Mode != sandbox.WorkspaceWrite || s.Image != "alpine:3.20" || s.User != UserHost {
		t.Fatalf("defaults = %+v", s)
	}
	if s.Limits != sandbox.DefaultLimits() {
		t.Fatalf("limits = %+v", s.Limits)
	}
	if len(cfg.Sources) != 2 || cfg.Sources[0].Exists || !cfg.Sources[0].Trusted || cfg.Sources[1].Trusted {
		t.Fatalf("sources = %+v", cfg.Sources)
	}
}

func TestUserConfig(t *testing.T) {
	dir := t.TempDir()
	f := write(t, filepath.Join(dir, "config.toml"), `version = 1
[sandbox]
backend = "docker"
image = "vak-test:latest"
user = "root"
mode = "read-only"
timeout = "90s"
[sandbox.limits]
memory = "512m"
cpus = 1.5
pids = 64
tmpfs = "16m"
[files]
protected = ["secrets/", "./deploy.sh"]
`)
	cfg, err := Load(Options{UserFile: f})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	want := sandbox.Limits{Memory: 512 << 20, CPUs: 1.5, Pids: 64, TmpfsSize: 16 << 20}
	if s.Backend != sandbox.Docker || s.Image != "vak-test:latest" || s.User != UserRoot || s.Mode != sandbox.ReadOnly || s.Timeout != 90*time.Second || s.Limits != want {
		t.Fatalf("sandbox = %+v", s)
	}
	if want := strings.Join(append(DefaultProtected, "secrets", "deploy.sh"), ","); strings.Join(cfg.Files.Protected, ",") != want {
		t.Fatalf("protected = %v", cfg.Files.Protected)
	}
	// cpus as a TOML integer is accepted too.
	if _, err := Parse("int.toml", []byte("version = 1\n[sandbox.limits]\ncpus = 2\n")); err != nil {
		t.Fatalf("integer cpus: %v", err)
	}
}

// The config flow: sandbox.backend = "docker" in user config
// yields the docker backend; the same key in project config is stripped with
// a warning naming it.
func TestConfigFlowBackendTrust(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "user", "config.toml"), "version = 1\n[sandbox]\nbackend = \"docker\"\nruntime = \"runsc\"\n")
	ws := filepath.Join(dir, "ws")
	cfg, err := Load(Options{UserFile: user, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.Backend != sandbox.Docker || cfg.Sandbox.Runtime != "runsc" {
		t.Fatalf("user config backend = %q runtime %q, want docker and runsc", cfg.Sandbox.Backend, cfg.Sandbox.Runtime)
	}
	b, res, err := registryForTest().Resolve(cfg.Sandbox.Backend, cfg.Sandbox.Mode)
	if err != nil || b.Name() != "docker" || res.Effective != sandbox.Docker {
		t.Fatalf("resolve = %v %+v %v", b, res, err)
	}

	// Now only the project config asks for docker (and more).
	user2 := write(t, filepath.Join(dir, "user2", "config.toml"), "version = 1\n")
	write(t, filepath.Join(ws, ".vak", "config.toml"), `version = 1
[sandbox]
backend = "docker"
image = "evil:latest"
runtime = "runc"
user = "root"
mode = "read-only"
[sandbox.limits]
pids = 100000
`)
	cfg, err = Load(Options{UserFile: user2, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.Backend != sandbox.Auto || cfg.Sandbox.Image != DefaultImage || cfg.Sandbox.Runtime != "" || cfg.Sandbox.User != UserHost || cfg.Sandbox.Limits.Pids != sandbox.DefaultPids {
		t.Fatalf("project config widened the sandbox: %+v", cfg.Sandbox)
	}
	if cfg.Sandbox.Mode != sandbox.ReadOnly {
		t.Fatalf("project config could not narrow the mode: %v", cfg.Sandbox.Mode)
	}
	warn := strings.Join(cfg.Warnings, "\n")
	for _, k := range []string{"sandbox.backend", "sandbox.image", "sandbox.runtime", "sandbox.user", "sandbox.limits.pids"} {
		if !strings.Contains(warn, "ignoring "+k+":") {
			t.Errorf("no warning names %s:\n%s", k, warn)
		}
	}
	if strings.Contains(warn, "sandbox.mode") {
		t.Errorf("narrowing mode was warned about:\n%s", warn)
	}
}

func TestProjectMayOnlyNarrow(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "u.toml"), "version = 1\n[sandbox]\nmode = \"read-only\"\ntimeout = \"1m\"\n")
	ws := filepath.Join(dir, "ws")
	write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[sandbox]\nmode = \"full-access\"\ntimeout = \"1h\"\n[files]\nprotected = [\"Makefile\"]\n")
	cfg, err := Load(Options{UserFile: user, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.Mode != sandbox.ReadOnly || cfg.Sandbox.Timeout != time.Minute {
		t.Fatalf("project widened: %+v", cfg.Sandbox)
	}
	if len(cfg.Warnings) != 2 {
		t.Fatalf("warnings = %q", cfg.Warnings)
	}
	if cfg.Files.Protected[len(cfg.Files.Protected)-1] != "Makefile" {
		t.Fatalf("project could not add a protected path: %v", cfg.Files.Protected)
	}
	// A shorter timeout is a narrowing and is applied; "0" (none) is not.
	write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[sandbox]\ntimeout = \"10s\"\n")
	if cfg, err = Load(Options{UserFile: user, Workspace: ws}); err != nil || cfg.Sandbox.Timeout != 10*time.Second {
		t.Fatalf("shorter timeout: %v %v", cfg.Sandbox.Timeout, err)
	}
	write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[sandbox]\ntimeout = \"0s\"\n")
	if cfg, err = Load(Options{UserFile: user, Workspace: ws}); err != nil || cfg.Sandbox.Timeout != time.Minute {
		t.Fatalf("zero timeout from project: %v %v", cfg.Sandbox.Timeout, err)
	}
}

func TestStrictErrorsNameFileLineKey(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "version = 1\n[sandbox]\nbackend = \"docker\"\nbakcend = \"none\"\n", []string{":4:", "sandbox.bakcend", "unknown key"}},
		{"unknown section", "version = 1\n\n[sandboxx]\nx = 1\n", []string{":3:", "sandboxx"}},
		{"wrong type", "version = 1\n[sandbox.limits]\npids = \"many\"\n", []string{":3:", "sandbox.limits.pids"}},
		{"syntax", "version = 1\n[sandbox\n", []string{":2:"}},
		{"missing version", "[sandbox]\nmode = \"read-only\"\n", []string{"version", "missing"}},
		{"bad version", "version = 2\n", []string{":1:", "unsupported version 2"}},
		{"bad backend", "version = 1\n[sandbox]\nbackend = \"chroot\"\n", []string{"sandbox.backend", "chroot"}},
		{"bad mode", "version = 1\n[sandbox]\nmode = \"rw\"\n", []string{"sandbox.mode", "rw"}},
		{"bad user", "version = 1\n[sandbox]\nuser = \"nobody\"\n", []string{"sandbox.user"}},
		{"bad memory", "version = 1\n[sandbox.limits]\nmemory = \"lots\"\n", []string{"sandbox.limits.memory"}},
		{"bad pids", "version = 1\n[sandbox.limits]\npids = 1\n", []string{"sandbox.limits.pids"}},
		{"bad cpus", "version = 1\n[sandbox.limits]\ncpus = -1\n", []string{"sandbox.limits.cpus"}},
		{"bad image", "version = 1\n[sandbox]\nimage = \"--privileged\"\n", []string{"sandbox.image"}},
		{"bad runtime", "version = 1\n[sandbox]\nruntime = \"--privileged\"\n", []string{":3:", "sandbox.runtime", "not a Docker runtime name"}},
		{"empty runtime", "version = 1\n[sandbox]\nruntime = \"\"\n", []string{"sandbox.runtime"}},
		{"escaping protected", "version = 1\n[files]\nprotected = [\"ok\", \"../x\"]\n", []string{"files.protected[1]"}},
		{"absolute protected", "version = 1\n[files]\nprotected = [\"/etc\"]\n", []string{"files.protected[0]"}},
		{"bad home", "version = 1\n[sandbox]\nhome = \"~/agent\"\n", []string{":3:", "sandbox.home", `"~/agent"`}},
		{"bad profile", "version = 1\n[sandbox]\nhome = \"profile:../x\"\n", []string{"sandbox.home", `"../x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := write(t, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".toml"), tc.body)
			_, err := Load(Options{UserFile: f})
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			for _, w := range append(tc.want, f) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// An invalid project config is an error too (fail closed), and unknown keys in
// it are reported, not silently stripped.
func TestInvalidProjectConfigFails(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	pf := write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[sandbox]\nmoed = \"read-only\"\n")
	_, err := Load(Options{UserFile: write(t, filepath.Join(dir, "user.toml"), "version = 1\n"), Workspace: ws})
	if err == nil || !strings.Contains(err.Error(), pf+":3:") {
		t.Fatalf("err = %v", err)
	}
}

func TestConfigNotRegularOrHuge(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(Options{UserFile: dir}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("directory as config: %v", err)
	}
	big := write(t, filepath.Join(dir, "big.toml"), "version = 1\n#"+strings.Repeat("x", MaxFileSize)+"\n")
	if _, err := Load(Options{UserFile: big}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("huge config: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"2g": 2 << 30, "512m": 512 << 20, "64MiB": 64 << 20, "1k": 1024, "100": 100, "1G": 1 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "g", "-1g", "1.5g", "1x", "99999999999999999999"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("version = 1\n[sandbox]\nbackend = \"docker\"\n"))
	f.Add([]byte("version = 1\n[sandbox.limits]\nmemory = \"2g\"\n[files]\nprotected=[\"a\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.toml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if !cfg.Sandbox.Mode.Restricted() && cfg.Sandbox.Mode != sandbox.FullAccess {
			t.Fatalf("invalid mode accepted: %v", cfg.Sandbox.Mode)
		}
		for _, p := range cfg.Files.Protected {
			if filepath.IsAbs(p) || strings.HasPrefix(p, "..") {
				t.Fatalf("escaping protected path accepted: %q", p)
			}
		}
	})
}

func TestSandboxPathsAndEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	cfg, err := Parse("ok.toml", []byte("version = 1\n[sandbox]\nallow_weaker = true\nread = [\"~/go/pkg/mod\", \"/opt/tools\"]\nwrite = [\"~/.cache/go-build\"]\nenv = [\"GOFLAGS\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	if !s.AllowWeaker || s.ReadPaths[0] != filepath.Join(dir, "home/go/pkg/mod") || s.ReadPaths[1] != "/opt/tools" || s.WritePaths[0] != filepath.Join(dir, "home/.cache/go-build") || s.Env[0] != "GOFLAGS" {
		t.Fatalf("sandbox = %+v", s)
	}
	for _, bad := range []string{
		`read = ["relative"]`,
		`read = ["/"]`,
		`write = ["~/.config"]`,            // contains vak's config dir
		`write = ["~/.local/state/vak/x"]`, // inside vak's state dir
		`read = ["~/"]`,                    // all of home
		`env = ["BAD NAME"]`,
	} {
		if _, err := Parse("bad.toml", []byte("version = 1\n[sandbox]\n"+bad+"\n")); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s accepted: %v", bad, err)
		}
	}
	// None of these may come from a project config.
	ws := filepath.Join(dir, "ws")
	write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[sandbox]\nallow_weaker = true\nread = [\"/etc\"]\nwrite = [\"/tmp\"]\nenv = [\"AWS_SECRET_ACCESS_KEY\"]\n")
	cfg, err = Load(Options{UserFile: write(t, filepath.Join(dir, "user.toml"), "version = 1\n"), Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.AllowWeaker || cfg.Sandbox.ReadPaths != nil || cfg.Sandbox.WritePaths != nil || cfg.Sandbox.Env != nil || len(cfg.Warnings) != 4 {
		t.Fatalf("project config widened the sandbox: %+v %q", cfg.Sandbox, cfg.Warnings)
	}
}

// The trusted config chooses the home; a project config may only narrow it
// to fresh (anything else is ignored with a warning naming the key).
func TestHomeProjectMayOnlyChooseFresh(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "u.toml"), "version = 1\n[sandbox]\nhome = \"profile:work\"\n")
	ws := filepath.Join(dir, "ws")
	cfg, err := Load(Options{UserFile: user, Workspace: ws})
	if err != nil || cfg.Sandbox.Home != (sandbox.HomeChoice{Kind: sandbox.HomeProfile, Name: "work"}) {
		t.Fatalf("trusted home: %+v %v", cfg.Sandbox.Home, err)
	}
	if d := Default().Sandbox; d.Home != sandbox.DefaultHome || d.HomeSet {
		t.Errorf("default home %v (set %v), want %v, not set", d.Home, d.HomeSet, sandbox.DefaultHome)
	}
	if !cfg.Sandbox.HomeSet {
		t.Error("a home from the user config is not marked as chosen")
	}
	for _, widen := range []string{"workspace", "profile:other"} {
		write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[sandbox]\nhome = \""+widen+"\"\n")
		cfg, err := Load(Options{UserFile: user, Workspace: ws})
		if err != nil || cfg.Sandbox.Home.Name != "work" {
			t.Fatalf("project home %q: %+v %v", widen, cfg.Sandbox.Home, err)
		}
		if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "sandbox.home") {
			t.Errorf("project home %q: warnings %q", widen, cfg.Warnings)
		}
	}
	write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[sandbox]\nhome = \"fresh\"\n")
	if cfg, err = Load(Options{UserFile: user, Workspace: ws}); err != nil || cfg.Sandbox.Home.Kind != sandbox.HomeFresh || len(cfg.Warnings) != 0 {
		t.Fatalf("project narrowing to fresh: %+v %v %q", cfg.Sandbox.Home, err, cfg.Warnings)
	}
}

// A config file named explicitly (vak --config) must be a readable regular
// file: absent, a directory, a FIFO (which must not hang the open) or
// unreadable is an *Error naming it, wrapping ErrInvalid (exit 78).
// Control: the same file once it exists loads, and the default user
// config may be absent (TestDefaults).
func TestNamedConfigMustExist(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := write(t, filepath.Join(dir, "unreadable.toml"), "version = 1\n")
	os.Chmod(unreadable, 0)
	notDir := write(t, filepath.Join(dir, "file"), "")
	for _, tc := range []struct {
		name, file string
		want       string
		cause      error
	}{
		{"absent", filepath.Join(dir, "missing.toml"), "does not exist", fs.ErrNotExist},
		{"directory", dir, "not a regular file", nil},
		{"fifo", fifo, "not a regular file", nil},
		{"below a file", filepath.Join(notDir, "config.toml"), "cannot be read: not a directory", nil},
		{"unreadable", unreadable, "cannot be read: permission denied", fs.ErrPermission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "unreadable" && os.Getuid() == 0 {
				t.Skip("root reads any file (the non-root leg runs this case)")
			}
			_, err := Load(Options{UserFile: tc.file})
			var e *Error
			if !errors.As(err, &e) || e.File != tc.file || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load(%s) = %v, want an *Error naming it: %s", tc.file, err, tc.want)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("%v does not wrap %v", err, tc.cause)
			}
		})
	}
	// Control: once the file exists, it loads.
	named := write(t, filepath.Join(dir, "missing.toml"), "version = 1\n[sandbox]\nmode = \"read-only\"\n")
	if cfg, err := Load(Options{UserFile: named}); err != nil || cfg.Sandbox.Mode != sandbox.ReadOnly || !cfg.Sources[0].Exists {
		t.Fatalf("control: %v %+v", err, cfg)
	}
}

// An unknown key names the valid key nearest to it, in every section of
// both files (and only when one is close). In a project config, a
// suggestion only the user config may set says so.
func TestUnknownKeySuggests(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(t.TempDir(), "xdg"))
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		project    bool
		key, want  string // want "" means no suggestion
	}{
		{"sandbox", "[sandbox]\nbakend = \"docker\"\n", false, "sandbox.bakend", "did you mean backend?"},
		{"limits", "[sandbox.limits]\nmemroy = \"1g\"\n", false, "sandbox.limits.memroy", "did you mean memory?"},
		{"files", "[files]\nprotcted = []\n", false, "files.protcted", "did you mean protected?"},
		{"session", "[session]\nallow-install = true\n", false, "session.allow-install", "did you mean allow_install?"},
		{"network", "[network]\npolcy = \"proxied\"\n", false, "network.polcy", "did you mean policy?"},
		{"network rules", "[[network.rules]]\nhostz = [\"a.test\"]\n", false, "network.rules.hostz", "did you mean hosts?"},
		{"network dns", "[network.dns]\nupstreams = []\n", false, "network.dns.upstreams", "did you mean upstream?"},
		{"gateway", "[gateway]\nlistne = \"127.0.0.1:0\"\n", false, "gateway.listne", "did you mean listen?"},
		{"gateway timeouts", "[gateway.timeouts]\ndail = \"1s\"\n", false, "gateway.timeouts.dail", "did you mean dial?"},
		{"secrets", "[secrets.TOKEN]\nvaleu = \"x\"\n", false, "secrets.TOKEN.valeu", "did you mean value?"},
		{"agent_network", "[agent_network]\nenabeld = true\n", false, "agent_network.enabeld", "did you mean enabled?"},
		{"agent_network workspace", "[[agent_network.workspace]]\npeer = []\n", false, "agent_network.workspace.peer", "did you mean peers?"},
		{"section", "[sandbx]\nmode = \"read-only\"\n", false, "sandbx", "did you mean sandbox?"},
		{"not close", "[sandbox]\nmemory = \"1g\"\n", false, "sandbox.memory", ""},
		{"nothing alike", "[session]\nxyzzy = 1\n", false, "session.xyzzy", ""},
		// A project config: the suggestion is there, and a privileged one
		// says where it belongs.
		{"project mode", "[sandbox]\nmdoe = \"read-only\"\n", true, "sandbox.mdoe", "did you mean mode?"},
		{"project agent_network", "[agent_network]\nenabeld = false\n", true, "agent_network.enabeld", "did you mean enabled?"},
		{"project backend", "[sandbox]\nbakend = \"docker\"\n", true, "sandbox.bakend", "did you mean backend? (sandbox.backend is privileged: a project config may not set it, the user config "},
		{"project section", "[netwrk]\npolicy = \"proxied\"\n", true, "netwrk", "did you mean network? (network is privileged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "version = 1\n" + tc.body
			var err error
			var file string
			if tc.project {
				ws := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
				file = write(t, filepath.Join(ws, ".vak", "config.toml"), body)
				_, err = Load(Options{Workspace: ws})
			} else {
				file = write(t, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".toml"), body)
				_, err = Load(Options{UserFile: file})
			}
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("accepted or wrong class: %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, file+":") || !strings.Contains(msg, tc.key+": unknown key") {
				t.Errorf("%q names no file, line and key %s", msg, tc.key)
			}
			switch {
			case tc.want == "" && strings.Contains(msg, "did you mean"):
				t.Errorf("%q suggests a key that is not close", msg)
			case tc.want != "" && !strings.Contains(msg, tc.want):
				t.Errorf("%q lacks %q", msg, tc.want)
			case tc.project && !strings.Contains(tc.want, "privileged") && strings.Contains(msg, "privileged"):
				t.Errorf("%q calls a key a project config may set privileged", msg)
			case !tc.project && strings.Contains(msg, "privileged"):
				t.Errorf("%q: the user config may set every key", msg)
			}
		})
	}
}
