package seatbelt

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"vak/internal/catrust"
	"vak/internal/sandbox"
)

var update = flag.Bool("update", false, "rewrite the golden profiles in testdata/")

const (
	home = "/Users/alice"
	ws   = "/Users/alice/src/proj"
	tmp  = "/private/var/folders/xy/abc123/T/vak-s1"
)

func basePolicy(mode sandbox.Mode) Policy {
	return Policy{Workspace: ws, Mode: mode, TempDir: tmp, UserHome: home}
}

// goldenPolicies are the representative policies whose profiles are kept in
// testdata/NAME.sb.
func goldenPolicies() map[string]Policy {
	extra := basePolicy(sandbox.WorkspaceWrite)
	extra.ReadPaths = []string{"/", "/Users/alice/.gitconfig", "/opt/tools", "/Users/alice/go/pkg/mod"}
	extra.WritePaths = []string{"/Users/alice/.cache/vak-go", "/Volumes/scratch/shared"}
	extra.Deny = []string{"/Users/alice/.config/vak", "/Users/alice/.local/state/vak"}

	prot := basePolicy(sandbox.WorkspaceWrite)
	prot.Protected = []string{"Makefile", "deploy/prod/secrets.env", ".github/workflows", ".git/hooks"}

	awkward := Policy{
		Workspace: `/Users/o"brien/my proj (v2)/a\b;c #"x"`,
		Mode:      sandbox.WorkspaceWrite,
		TempDir:   "/private/var/folders/q[1]/T/vak.*+?{}|^$",
		UserHome:  `/Users/o"brien`,
		ReadPaths: []string{"/Users/o\"brien/Документы/Kelvin K", "/opt/a b/c'd"},
		Protected: []string{"we\"ird\\name"},
	}

	network := basePolicy(sandbox.WorkspaceWrite)
	network.AllowNetwork = true

	persistent := basePolicy(sandbox.WorkspaceWrite)
	persistent.Deny = []string{"/Users/alice/.config/vak", "/Users/alice/.local/state/vak"}
	persistent.AgentHome = homeDir

	proxied := basePolicy(sandbox.WorkspaceWrite)
	proxied.Proxy = &Proxy{Port: proxyPort, TrustDir: trustDir}
	proxied.Deny = []string{"/Users/alice/.config/vak", "/Users/alice/.local/state/vak"}

	return map[string]Policy{
		"read-only":       basePolicy(sandbox.ReadOnly),
		"workspace-write": basePolicy(sandbox.WorkspaceWrite),
		"extra-paths":     extra,
		"protected":       prot,
		"awkward-paths":   awkward,
		"network":         network,
		"proxied":         proxied,
		"persistent-home": persistent,
	}
}

func TestGolden(t *testing.T) {
	for name, p := range goldenPolicies() {
		t.Run(name, func(t *testing.T) {
			got, err := Profile(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parseSBPL(got); err != nil {
				t.Fatalf("generated profile does not parse: %v", err)
			}
			file := filepath.Join("testdata", name+".sb")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("profile differs from %s (run go test -update and review the diff):\n%s", file, firstDiff(string(want), got))
			}
		})
	}
}

// TestGoldenFilesAreUsed fails when testdata holds a profile no policy makes.
func TestGoldenFilesAreUsed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.sb"))
	if err != nil {
		t.Fatal(err)
	}
	ps := goldenPolicies()
	for _, f := range files {
		if _, ok := ps[strings.TrimSuffix(filepath.Base(f), ".sb")]; !ok {
			t.Errorf("%s has no policy in goldenPolicies", f)
		}
	}
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}

func TestProfileErrors(t *testing.T) {
	mod := func(f func(*Policy)) Policy {
		p := basePolicy(sandbox.WorkspaceWrite)
		f(&p)
		return p
	}
	tests := []struct {
		name string
		p    Policy
		want error
		msg  string // a fragment the message must contain
	}{
		{"full access", mod(func(p *Policy) { p.Mode = sandbox.FullAccess }), ErrMode, "full-access"},
		{"zero mode", mod(func(p *Policy) { p.Mode = 0 }), ErrMode, "Mode(0)"},
		{"relative workspace", mod(func(p *Policy) { p.Workspace = "src/proj" }), ErrPath, `Workspace "src/proj" is not absolute`},
		{"empty workspace", mod(func(p *Policy) { p.Workspace = "" }), ErrPath, "Workspace is empty"},
		{"unclean workspace", mod(func(p *Policy) { p.Workspace = "/Users/alice/src/../proj" }), ErrPath, `want "/Users/alice/proj"`},
		{"trailing slash", mod(func(p *Policy) { p.TempDir = tmp + "/" }), ErrPath, "TempDir"},
		{"empty home", mod(func(p *Policy) { p.UserHome = "" }), ErrPath, "Home is empty"},
		{"root home", mod(func(p *Policy) { p.UserHome = "/" }), ErrPath, "root directory"},
		{"NUL", mod(func(p *Policy) { p.Workspace = ws + "\x00x" }), ErrPath, "control character"},
		{"newline", mod(func(p *Policy) { p.ReadPaths = []string{"/opt/a\n(allow default)"} }), ErrPath, "ReadPaths[0]"},
		{"carriage return", mod(func(p *Policy) { p.Deny = []string{"/a\rb"} }), ErrPath, "Deny[0]"},
		{"DEL", mod(func(p *Policy) { p.WritePaths = []string{"/ok", "/a\x7f"} }), ErrPath, "WritePaths[1]"},
		{"C1 control", mod(func(p *Policy) { p.Workspace = ws + "\u0085" }), ErrPath, "control character"},
		{"invalid UTF-8", mod(func(p *Policy) { p.Workspace = ws + "\xff" }), ErrPath, "UTF-8"},
		{"relative read path", mod(func(p *Policy) { p.ReadPaths = []string{"~/.gitconfig"} }), ErrPath, "ReadPaths[0]"},
		{"workspace is home", mod(func(p *Policy) { p.Workspace = home }), ErrHomeExposed, "Workspace"},
		{"workspace contains home", mod(func(p *Policy) { p.Workspace = "/Users" }), ErrHomeExposed, "Workspace"},
		{"workspace is root", mod(func(p *Policy) { p.Workspace = "/" }), ErrHomeExposed, "Workspace"},
		{"temp dir contains home", mod(func(p *Policy) { p.TempDir = "/" }), ErrHomeExposed, "TempDir"},
		{"read path is home", mod(func(p *Policy) { p.ReadPaths = []string{"/opt", home} }), ErrHomeExposed, "ReadPaths[1]"},
		{"write path is home", mod(func(p *Policy) { p.WritePaths = []string{home} }), ErrHomeExposed, "WritePaths[0]"},
		{"absolute protected", mod(func(p *Policy) { p.Protected = []string{"/etc/passwd"} }), ErrPath, "Protected[0]"},
		{"escaping protected", mod(func(p *Policy) { p.Protected = []string{"../x"} }), ErrPath, "not inside the workspace"},
		{"dotdot protected", mod(func(p *Policy) { p.Protected = []string{".."} }), ErrPath, "not inside the workspace"},
		{"dot protected", mod(func(p *Policy) { p.Protected = []string{"."} }), ErrPath, "not inside the workspace"},
		{"unclean protected", mod(func(p *Policy) { p.Protected = []string{".vak/"} }), ErrPath, `want ".vak"`},
		{"empty protected", mod(func(p *Policy) { p.Protected = []string{"a", ""} }), ErrPath, "Protected[1] is empty"},
		{"non-ASCII protected", mod(func(p *Policy) { p.Protected = []string{"café"} }), ErrPath, "not ASCII"},
		{"NUL protected", mod(func(p *Policy) { p.Protected = []string{"a\x00"} }), ErrPath, "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Profile(tt.p)
			if err == nil {
				t.Fatalf("Profile succeeded:\n%s", got)
			}
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("error %q is not %q (and ErrInvalidPolicy)", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not contain %q", err, tt.msg)
			}
			if strings.ContainsAny(err.Error(), "\x00\n\r") {
				t.Fatalf("error %q carries a raw control character", err)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		`/a`:             `"/a"`,
		`/a"b`:           `"/a\"b"`,
		`/a\b`:           `"/a\\b"`,
		`/a\"`:           `"/a\\\""`,
		`/#"x")(allow`:   `"/#\"x\")(allow"`,
		`/Документы`:     `"/Документы"`,
		`/a;b (c) 'd' e`: `"/a;b (c) 'd' e"`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
		toks, err := lex(quote(in))
		if err != nil || len(toks) != 1 || toks[0].val != in {
			t.Errorf("quote(%q) reads back as %+v, %v", in, toks, err)
		}
	}
}

func TestRegexQuote(t *testing.T) {
	for _, tt := range []struct {
		in   string
		fold bool
		want string
	}{
		{"/a.b", false, `/a\.b`},
		{`/x[1]*+?{}|^$()\`, false, `/x\[1\]\*\+\?\{\}\|\^\$\(\)\\`},
		{".git", true, `\.[Gg][Ii][Tt]`},
		{"k", true, "(K|k|\u212a)"},
		{"é1", true, "(É|é)1"},
		{"/-_ ", true, "/-_ "},
	} {
		if got := regexQuote(tt.in, tt.fold); got != tt.want {
			t.Errorf("regexQuote(%q, %v) = %q, want %q", tt.in, tt.fold, got, tt.want)
		}
	}
}

// access is one decision the model must reach for a policy.
type access struct {
	q     query
	allow bool
}

func rd(p string) query   { return query{op: "file-read-data", path: p} }
func meta(p string) query { return query{op: "file-read-metadata", path: p} }
func mapx(p string) query { return query{op: "file-map-executable", path: p} }
func wr(p string) query   { return query{op: "file-write-data", path: p} }
func mk(p string) query   { return query{op: "file-write-create", path: p} }
func rm(p string) query   { return query{op: "file-write-unlink", path: p} }
func ln(p string) query   { return query{op: "file-link", path: p} }
func sock(p string) query { return query{op: "network-outbound", path: p} }
func bindU(p string) query {
	return query{op: "network-bind", path: p}
}

var (
	tcpOut  = query{op: "network-outbound", ip: true}
	tcpBind = query{op: "network-bind", ip: true}
	tcpIn   = query{op: "network-inbound", ip: true}
)

func checkAccess(t *testing.T, p Policy, cases []access) {
	t.Helper()
	prof, err := Profile(p)
	if err != nil {
		t.Fatal(err)
	}
	forms, err := parseSBPL(prof)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rulesOf(forms)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if got := decide(rs, c.q); got != c.allow {
			t.Errorf("%s %q (name %q, ip %v): allowed = %v, want %v", c.q.op, c.q.path, c.q.name, c.q.ip, got, c.allow)
		}
	}
}

func allow(q query) access { return access{q, true} }
func deny(q query) access  { return access{q, false} }

// TestModelFilesystem checks the filesystem meaning of representative
// profiles under the model of Seatbelt's matching: each secret read, write
// outside the workspace and protected-path write is attempted and must be
// denied, next to a control that must be allowed.
func TestModelFilesystem(t *testing.T) {
	ww := basePolicy(sandbox.WorkspaceWrite)
	checkAccess(t, ww, []access{
		// The workspace and the temp dir.
		allow(rd(ws + "/main.go")), allow(wr(ws + "/main.go")), allow(mk(ws + "/new/file")),
		allow(rm(ws + "/old.txt")), allow(mapx(ws + "/build/libx.dylib")),
		allow(rd(tmp + "/x")), allow(mk(tmp + "/x")), allow(rm(tmp + "/x")),
		// System paths: readable, never writable.
		allow(rd("/usr/bin/git")), allow(mapx("/usr/lib/libSystem.B.dylib")), allow(rd("/")),
		allow(rd("/System/Library/Frameworks/Foundation.framework/Foundation")),
		allow(rd("/System/Volumes/Preboot/Cryptexes/OS/System/Library/dyld/dyld_shared_cache_arm64e")),
		allow(rd("/Library/Developer/CommandLineTools/usr/bin/clang")), allow(rd("/opt/homebrew/bin/go")),
		allow(rd("/private/etc/hosts")), allow(rd("/private/var/db/timezone/zoneinfo/UTC")),
		allow(rd("/Applications/Xcode.app/Contents/Developer/usr/bin/xcodebuild")),
		allow(rd("/Applications/Xcode-beta.app")), deny(rd("/Applications/Safari.app/Contents/Info.plist")),
		deny(wr("/usr/local/bin/x")), deny(mk("/Library/LaunchAgents/evil.plist")), deny(wr("/private/etc/hosts")),
		// Temp space other than the session's.
		deny(mk("/private/tmp/x")), deny(rd("/private/tmp/com.apple.launchd.abc/Listeners")),
		deny(rd("/private/var/folders/xy/abc123/T/other-app-file")), allow(meta("/private/var/folders/xy/abc123/T")),
		// Home: closed, in any case and through the data volume.
		deny(rd(home + "/.ssh/id_ed25519")), deny(mapx(home + "/.ssh/id_ed25519")), deny(meta(home + "/.aws/credentials")),
		deny(rd(home + "/.config/gh/hosts.yml")), deny(rd(home + "/Library/Keychains/login.keychain-db")),
		deny(rd(home + "/src/other-project/.env")), deny(wr(home + "/.zshrc")), deny(mk(home + "/Library/LaunchAgents/x.plist")),
		deny(rd("/System/Volumes/Data" + home + "/.ssh/id_ed25519")), deny(rd("/System/Volumes/Data/private/var/folders/zz/T/x")),
		deny(rd("/users/ALICE/.ssh/id_ed25519")), deny(rd("/Users/bob/.ssh/id_ed25519")),
		deny(rd("/Library/Keychains/System.keychain")),
		// Parents of the workspace: stat, never list.
		allow(meta(home)), allow(meta(home + "/src")), allow(meta("/Users")), allow(meta("/System/Volumes/Data")),
		deny(rd(home)), deny(rd(home + "/src")), deny(rd("/Users")),
		// Protected paths, existing or not, in any case; their parents; the workspace itself.
		deny(mk(ws + "/.git/hooks/pre-commit")), deny(wr(ws + "/.git/hooks/pre-commit")), deny(rm(ws + "/.git/hooks")),
		deny(wr(ws + "/.git/config")), deny(rm(ws + "/.git/config")), deny(mk(ws + "/.git/config")),
		deny(mk(ws + "/.GIT/hooks/pre-commit")), deny(mk(ws + "/.git/HOOKS/x")), deny(wr(ws + "/.git/Config")),
		deny(mk(ws + "/.vak")), deny(mk(ws + "/.vak/config.toml")), deny(mk(ws + "/.VAK/config.toml")),
		deny(rm(ws + "/.git")), deny(mk(ws + "/.Git")), deny(rm(ws)), deny(mk(ws)),
		allow(rd(ws + "/.git/config")), allow(rd(ws + "/.vak/config.toml")),
		allow(wr(ws + "/.git/index")), allow(mk(ws + "/.git/objects/ab/cdef")), allow(wr(ws + "/.git/HEAD")),
		allow(mk(ws + "/.github/workflows/ci.yml")), allow(mk(ws + "/.gitignore")), allow(mk(ws + "/.vakrc")),
		allow(mk(ws + "/sub/.vak/config.toml")),
		// Hard links, anywhere.
		deny(ln(ws + "/a")), deny(ln(tmp + "/a")), deny(ln(ws + "/.git/config")),
		// Devices.
		allow(wr("/dev/null")), allow(rd("/dev/urandom")), allow(wr("/dev/fd/1")), allow(rd("/dev/tty")),
		deny(query{op: "file-ioctl", path: "/dev/tty"}), deny(wr("/dev/ttys003")), deny(rd("/dev/disk0")),
		allow(query{op: "file-ioctl", path: "/dev/ttys004", ext: "com.apple.sandbox.pty"}),
	})

	ro := basePolicy(sandbox.ReadOnly)
	checkAccess(t, ro, []access{
		allow(rd(ws + "/main.go")), deny(wr(ws + "/main.go")), deny(mk(ws + "/new")), deny(rm(ws + "/main.go")),
		allow(mk(tmp + "/x")), deny(mk(ws + "/.git/hooks/pre-commit")), deny(rd(home + "/.ssh/id_rsa")),
	})
}

func TestModelExtraPaths(t *testing.T) {
	p := goldenPolicies()["extra-paths"]
	checkAccess(t, p, []access{
		// "/" opens everything outside Home, and nothing inside it.
		allow(rd("/Users/Shared/notes.txt")), allow(rd("/private/var/log/system.log")), allow(rd("/Applications/Safari.app")),
		deny(rd(home + "/.ssh/id_rsa")), deny(rd("/System/Volumes/Data" + home + "/.ssh/id_rsa")),
		deny(rd("/USERS/alice/.ssh/id_rsa")), deny(rd("/Users/Alice/.aws/credentials")),
		deny(rd("/Library/Keychains/System.keychain")),
		deny(wr("/Users/Shared/notes.txt")),
		// Explicit grants inside Home, and their parents.
		allow(rd(home + "/.gitconfig")), deny(wr(home + "/.gitconfig")), deny(rd(home + "/.git-credentials")),
		allow(rd(home + "/go/pkg/mod/golang.org/x/text@v0.1.0/go.mod")), allow(meta(home + "/go/pkg")),
		allow(mk(home + "/.cache/vak-go/ab/cd")), deny(mk(home + "/.cache/other/x")), allow(meta(home + "/.cache")),
		allow(mk("/Volumes/scratch/shared/x")), allow(rd("/opt/tools/bin/x")), deny(wr("/opt/tools/bin/x")),
		// Deny paths win over every grant.
		deny(rd(home + "/.config/vak/config.toml")), deny(rd(home + "/.local/state/vak/ca.key")),
		deny(rd("/system/volumes/data" + home + "/.local/state/vak/ca.key")),
		deny(sock(home + "/.local/state/vak/gateway.sock")),
	})

	denyInGrant := basePolicy(sandbox.WorkspaceWrite)
	denyInGrant.WritePaths = []string{home + "/.config"}
	denyInGrant.Deny = []string{home + "/.config/vak"}
	checkAccess(t, denyInGrant, []access{
		allow(mk(home + "/.config/tool/x")), deny(mk(home + "/.config/vak/config.toml")), deny(rd(home + "/.config/vak")),
		deny(rd(home + "/.config/VAK/config.toml")),
	})

	custom := goldenPolicies()["protected"]
	checkAccess(t, custom, []access{
		deny(wr(ws + "/Makefile")), deny(mk(ws + "/makefile")), deny(mk(ws + "/deploy/prod/secrets.env")),
		deny(mk(ws + "/Deploy/Prod/Secrets.env")), deny(rm(ws + "/deploy")), deny(rm(ws + "/deploy/prod")),
		deny(mk(ws + "/.github/workflows/evil.yml")), deny(rm(ws + "/.github")),
		allow(mk(ws + "/deploy/staging.env")), allow(mk(ws + "/Makefile.local")), allow(mk(ws + "/.github/CODEOWNERS")),
		deny(mk(ws + "/.git/hooks/x")), deny(wr(ws + "/.git/config")), deny(mk(ws + "/.vak/x")),
	})
}

func TestModelAwkwardPaths(t *testing.T) {
	p := goldenPolicies()["awkward-paths"]
	w, h := p.Workspace, p.UserHome
	checkAccess(t, p, []access{
		allow(rd(w + "/x")), allow(mk(w + "/x")), deny(mk(w + "/.git/hooks/x")), deny(mk(w + `/WE"IRD\name`)),
		allow(mk(w + `/we"ird\name2`)), deny(rd(h + "/.ssh/id_rsa")), allow(meta(h)),
		allow(mk(p.TempDir + "/f")), deny(mk("/private/var/folders/q1/T/vak.x")),
		allow(rd(h + "/Документы/Kelvin K/a")), deny(rd(h + "/ДОКУМЕНТЫ/x")), deny(rd(h + "/Документы/other")),
	})
}

func TestModelNetwork(t *testing.T) {
	off := basePolicy(sandbox.WorkspaceWrite)
	on := basePolicy(sandbox.WorkspaceWrite)
	on.AllowNetwork = true
	for _, tt := range []struct {
		p     Policy
		allow bool
	}{{off, false}, {on, true}} {
		checkAccess(t, tt.p, []access{
			{tcpOut, tt.allow}, {tcpBind, tt.allow}, {tcpIn, tt.allow},
			{query{op: "mach-lookup", name: "com.apple.dnssd.service"}, tt.allow},
			{sock("/private/var/run/mDNSResponder"), tt.allow},
			// Unix-domain sockets: the temp dir only, whatever the network policy.
			allow(sock(tmp + "/ipc.sock")), allow(bindU(tmp + "/ipc.sock")),
			deny(sock("/private/var/run/docker.sock")), deny(sock(home + "/.docker/run/docker.sock")),
			deny(sock("/private/tmp/com.apple.launchd.x/Listeners")), deny(sock(ws + "/x.sock")),
			deny(bindU(ws + "/x.sock")), deny(sock("/private/var/run/syslog")),
		})
	}
}

func TestModelServices(t *testing.T) {
	checkAccess(t, basePolicy(sandbox.ReadOnly), []access{
		allow(query{op: "mach-lookup", name: "com.apple.system.opendirectoryd.libinfo"}),
		deny(query{op: "mach-lookup", name: "com.apple.SecurityServer"}),
		deny(query{op: "mach-lookup", name: "com.apple.securityd.xpc"}),
		deny(query{op: "mach-lookup", name: "com.apple.cfprefsd.daemon"}),
		deny(query{op: "mach-lookup", name: "com.apple.coreservices.launchservicesd"}),
		deny(query{op: "mach-lookup", name: "com.apple.pasteboard.1"}),
		allow(query{op: "sysctl-read", name: "hw.ncpu"}),
		deny(query{op: "sysctl-read", name: "kern.procargs2"}),
		deny(query{op: "sysctl-write", name: "kern.maxproc"}),
		deny(query{op: "appleevent-send"}),
		deny(query{op: "user-preference-read"}),
	})
}

// TestProtectedAlways checks that AlwaysProtected is protected even when
// Policy.Protected is empty.
func TestProtectedAlways(t *testing.T) {
	p := basePolicy(sandbox.WorkspaceWrite)
	p.Protected = nil
	var cases []access
	for _, rel := range AlwaysProtected {
		cases = append(cases, deny(mk(ws+"/"+rel)), deny(mk(ws+"/"+strings.ToUpper(rel))), deny(mk(ws+"/"+rel+"/x")))
	}
	checkAccess(t, p, cases)
}

// TestProfileDeterministic guards the golden files' stability.
func TestProfileDeterministic(t *testing.T) {
	for name, p := range goldenPolicies() {
		a, _ := Profile(p)
		for range 5 {
			if b, _ := Profile(p); a != b {
				t.Fatalf("%s: Profile is not deterministic", name)
			}
		}
	}
}

const (
	proxyPort = 18443
	trustDir  = "/private/var/folders/xy/abc123/T/vak-trust-s1"
)

// --network proxied: the only IP operation allowed is a TCP connection to
// the gateway's port on loopback. Every other destination, port, protocol,
// bind or accept, DNS and the certificate services are denied; the trust
// files are readable and not writable. Positive controls: the same
// queries under AllowNetwork are allowed (TestModelNetwork), and the
// gateway's own port is allowed here.
func TestModelProxied(t *testing.T) {
	p := goldenPolicies()["proxied"]
	gw := "localhost:" + strconv.Itoa(proxyPort)
	out := func(addr string) query { return query{op: "network-outbound", ip: true, addr: addr} }
	checkAccess(t, p, []access{
		allow(out(gw)),
		deny(query{op: "network-outbound", ip: true, addr: gw, udp: true}),
		deny(out("localhost:" + strconv.Itoa(proxyPort+1))), deny(out("localhost:22")), deny(out("localhost:53")),
		deny(out("140.82.112.3:443")), deny(out("10.0.0.1:" + strconv.Itoa(proxyPort))), deny(out("[::1]:443")),
		deny(tcpOut), deny(tcpBind), deny(tcpIn),
		deny(query{op: "network-bind", ip: true, addr: gw}), deny(query{op: "network-inbound", ip: true, addr: gw}),
		deny(query{op: "mach-lookup", name: "com.apple.dnssd.service"}),
		deny(query{op: "mach-lookup", name: "com.apple.trustd"}),
		deny(query{op: "mach-lookup", name: "com.apple.SystemConfiguration.configd"}),
		deny(sock("/private/var/run/mDNSResponder")), deny(sock("/private/var/run/docker.sock")),
		allow(sock(tmp + "/ipc.sock")),
		allow(rd(trustDir + "/" + catrust.BundleFile)), allow(rd(trustDir + "/" + catrust.CAFile)),
		deny(wr(trustDir + "/" + catrust.BundleFile)), deny(wr(trustDir + "/new.pem")),
		deny(rd("/Users/alice/.local/state/vak/ca/key.pem")),
	})
}

// The proxy variables point at the gateway in both spellings, nothing
// bypasses it, and the trust variables are every backend's (catrust).
func TestProxyEnv(t *testing.T) {
	env := Proxy{Port: proxyPort, TrustDir: trustDir}.Env()
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	u := "http://127.0.0.1:" + strconv.Itoa(proxyPort)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		if got[k] != u {
			t.Errorf("%s=%q, want %q", k, got[k], u)
		}
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if v, ok := got[k]; !ok || v != "" {
			t.Errorf("%s=%q (set %v), want set and empty", k, v, ok)
		}
	}
	for _, kv := range catrust.Env(catrust.Dir) {
		k, v, _ := strings.Cut(kv, "=")
		want := strings.ReplaceAll(v, catrust.Dir, trustDir)
		if got[k] != want {
			t.Errorf("%s=%q, want %q (as catrust spells it, in the trust dir)", k, got[k], want)
		}
	}
}

// A proxied policy is refused when it cannot be what it says.
func TestProxyPolicyErrors(t *testing.T) {
	for name, mut := range map[string]func(p *Policy){
		"with AllowNetwork": func(p *Policy) { p.AllowNetwork = true },
		"port 0":            func(p *Policy) { p.Proxy.Port = 0 },
		"port 65536":        func(p *Policy) { p.Proxy.Port = 65536 },
		"relative trust":    func(p *Policy) { p.Proxy.TrustDir = "trust" },
		"unclean trust":     func(p *Policy) { p.Proxy.TrustDir = trustDir + "/../x" },
		"trust in deny":     func(p *Policy) { p.Proxy.TrustDir = "/Users/alice/.local/state/vak/trust" },
		"trust is home":     func(p *Policy) { p.Proxy.TrustDir = home },
		"trust holds home":  func(p *Policy) { p.Proxy.TrustDir = "/Users" },
	} {
		p := goldenPolicies()["proxied"]
		x := *p.Proxy
		p.Proxy = &x
		mut(&p)
		if _, err := Profile(p); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: %v, want ErrInvalidPolicy", name, err)
		}
	}
}

const homeDir = "/Users/alice/.local/state/vak/homes/workspace/0123456789abcdef01234567"

// A persistent home is readable and writable although it lies in the
// denied state dir and the closed home; the rest of both stays closed.
func TestModelPersistentHome(t *testing.T) {
	p := goldenPolicies()["persistent-home"]
	checkAccess(t, p, []access{
		allow(rd(homeDir + "/.claude/settings.json")), allow(wr(homeDir + "/.claude/settings.json")),
		allow(wr(homeDir + "/new")),
		deny(rd("/Users/alice/.local/state/vak/ca/key.pem")), deny(wr("/Users/alice/.local/state/vak/homes/profile/x/f")),
		deny(rd("/Users/alice/.local/state/vak/homes/workspace/other/f")),
		deny(rd(home + "/.ssh/id_ed25519")), deny(wr(home + "/.zshrc")),
		deny(rd("/System/Volumes/Data" + homeDir + "/f")),
	})
	for name, mut := range map[string]func(p *Policy){
		"home is Home":        func(p *Policy) { p.AgentHome = home },
		"home holds Home":     func(p *Policy) { p.AgentHome = "/Users" },
		"home is the state":   func(p *Policy) { p.AgentHome = "/Users/alice/.local/state/vak" },
		"home holds the deny": func(p *Policy) { p.AgentHome = "/Users/alice/.local" },
		"home relative":       func(p *Policy) { p.AgentHome = "homes/x" },
		"home keychains":      func(p *Policy) { p.AgentHome = "/Library" },
	} {
		q := goldenPolicies()["persistent-home"]
		mut(&q)
		if _, err := Profile(q); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: %v, want ErrInvalidPolicy", name, err)
		}
	}
}
