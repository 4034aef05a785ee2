package dockerd

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/profiles/seccomp"
)

func testSidecar() Sidecar {
	return Sidecar{
		Name: "s", Image: "vak-dockerd:x", NetworkMode: "container:nc",
		Daemon:     Daemon{Pool: netip.MustParsePrefix("10.213.0.0/16"), Gateway: netip.MustParseAddr("172.30.0.2")},
		TrustCA:    "/etc/vak/trust/vak-ca.pem",
		DataVolume: "s-lib",
		Mounts:     []mount.Mount{{Type: mount.TypeBind, Source: "/ws", Target: "/ws"}},
	}
}

func TestSpec(t *testing.T) {
	cfg, host, err := testSidecar().Spec()
	if err != nil {
		t.Fatal(err)
	}
	if host.Privileged {
		t.Error("sidecar is privileged")
	}
	if !slices.Equal(host.CapDrop, []string{"ALL"}) || len(host.CapAdd) != 16 {
		t.Errorf("capabilities: drop %v add %v", host.CapDrop, host.CapAdd)
	}
	for _, c := range []string{"SYS_MODULE", "SYS_PTRACE", "DAC_READ_SEARCH", "SYS_RAWIO", "SYS_TIME", "BPF"} {
		if slices.Contains(host.CapAdd, c) {
			t.Errorf("sidecar gets %s", c)
		}
	}
	if host.CgroupnsMode != container.CgroupnsModePrivate {
		t.Errorf("cgroupns %q", host.CgroupnsMode)
	}
	if host.Resources.Memory != DefaultMemory || host.Resources.PidsLimit == nil || *host.Resources.PidsLimit != DefaultPidsLimit {
		t.Errorf("limits %d %v", host.Resources.Memory, host.Resources.PidsLimit)
	}
	if _, ok := host.Tmpfs[RawSocketDir]; !ok {
		t.Errorf("raw socket dir is not a private tmpfs: %v", host.Tmpfs)
	}
	var prof *seccomp.Seccomp
	for _, o := range host.SecurityOpt {
		if js, ok := strings.CutPrefix(o, "seccomp="); ok {
			if err := json.Unmarshal([]byte(js), &prof); err != nil {
				t.Fatal(err)
			}
		}
		if strings.Contains(o, "unconfined") && !strings.HasPrefix(o, "apparmor=") {
			t.Errorf("security opt %q", o)
		}
	}
	if prof == nil || prof.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Fatalf("no deny-by-default seccomp profile: %+v", prof)
	}
	allowed := map[string]bool{}
	for _, s := range prof.Syscalls {
		if s.Action == "SCMP_ACT_ALLOW" && len(s.Args) == 0 && (s.Includes == nil || (len(s.Includes.Caps) == 0 && s.Includes.MinKernel == nil)) {
			for _, n := range s.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range ExtraSyscalls {
		if !allowed[n] {
			t.Errorf("profile does not allow %s", n)
		}
	}
	for _, n := range []string{"read", "execve", "openat"} {
		if !allowed[n] {
			t.Errorf("profile is not Docker's default: %s not allowed", n)
		}
	}
	for _, n := range []string{"kexec_load", "init_module", "open_by_handle_at", "bpf"} {
		if allowed[n] {
			t.Errorf("profile allows %s unconditionally", n)
		}
	}
	if cfg.Entrypoint[0] != "/bin/sh" || !strings.Contains(cfg.Cmd[1], "exec dockerd") {
		t.Errorf("entrypoint %v %v", cfg.Entrypoint, cfg.Cmd)
	}
	if host.NetworkMode != "container:nc" {
		t.Errorf("network mode %q", host.NetworkMode)
	}
}

func TestSpecRejects(t *testing.T) {
	for name, mod := range map[string]func(*Sidecar){
		"network not a container": func(s *Sidecar) { s.NetworkMode = "bridge" },
		"host network":            func(s *Sidecar) { s.NetworkMode = "host" },
		"mount over the raw socket": func(s *Sidecar) {
			s.Mounts = append(s.Mounts, mount.Mount{Type: mount.TypeVolume, Source: "v", Target: "/run"})
		},
		"mount at the raw socket": func(s *Sidecar) {
			s.Mounts = append(s.Mounts, mount.Mount{Type: mount.TypeVolume, Source: "v", Target: RawSocketDir})
		},
		"pool holds the gateway": func(s *Sidecar) { s.Daemon.Gateway = netip.MustParseAddr("10.213.4.4") },
		"pool too small":         func(s *Sidecar) { s.Daemon.Pool = netip.MustParsePrefix("10.213.0.0/25") },
		"relative CA":            func(s *Sidecar) { s.TrustCA = "ca.pem" },
		"no data volume":         func(s *Sidecar) { s.DataVolume = "" },
	} {
		s := testSidecar()
		mod(&s)
		if _, _, err := s.Spec(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDaemonJSON(t *testing.T) {
	js, err := testSidecar().Daemon.DaemonJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"bip": "10.213.0.1/24", "dns": "[172.30.0.2]", "ip6tables": "false", "ipv6": "false",
		"hosts": "[unix://" + RawSocket + "]", "storage-driver": "overlay2",
		"default-address-pools": "[map[base:10.213.0.0/16 size:24]]",
	}
	for k, v := range want {
		if got := strings.TrimSpace(strings.ReplaceAll(jsonString(m[k]), "\n", "")); got != v {
			t.Errorf("%s = %s, want %s", k, got, v)
		}
	}
}

func jsonString(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = jsonString(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ":" + jsonString(x[k])
		}
		return "map[" + strings.Join(parts, " ") + "]"
	default:
		b, _ := json.Marshal(x)
		return strings.Trim(string(b), `"`)
	}
}

func TestRecipeTag(t *testing.T) {
	a := DefaultRecipe.Tag()
	if a != DefaultRecipe.Tag() || !strings.HasPrefix(a, ImageRepo+":") {
		t.Fatalf("tag %q not stable", a)
	}
	r := DefaultRecipe
	r.Packages = append(slices.Clone(r.Packages), "curl")
	if r.Tag() == a {
		t.Fatal("a changed recipe kept the tag")
	}
}

func TestEntrypointGuard(t *testing.T) {
	d := testSidecar().Daemon
	cmd, err := d.Entrypoint("/ca.pem", "/opt/vak/vak", "dockerguard", "--label", "a=it's")
	if err != nil {
		t.Fatal(err)
	}
	script := cmd[2]
	guard := strings.Index(script, `'/opt/vak/vak' 'dockerguard' '--label' 'a=it'\''s' &`)
	if guard < 0 || guard > strings.Index(script, "exec dockerd") || guard < strings.Index(script, "/proc/self/cgroup") {
		t.Errorf("guard not started after the checks and before dockerd:\n%s", script)
	}
	if _, err := d.Entrypoint("/ca.pem", "vak", "dockerguard"); err == nil {
		t.Error("relative guard path accepted")
	}
	s := testSidecar()
	s.Guard = []string{"/opt/vak/vak", "dockerguard"}
	if _, _, err := s.Spec(); err == nil {
		t.Error("a guard without GuardSocket accepted")
	}
}
