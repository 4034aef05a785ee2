package dockerd

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/system"
)

func TestChooseBaseline(t *testing.T) {
	runc := map[string]system.RuntimeWithStatus{
		"runc":                  {Runtime: system.Runtime{Path: "runc"}},
		"io.containerd.runc.v2": {Runtime: system.Runtime{Type: "io.containerd.runc.v2"}},
	}
	withSysbox := map[string]system.RuntimeWithStatus{
		"runc":        {Runtime: system.Runtime{Path: "runc"}},
		SysboxRuntime: {Runtime: system.Runtime{Path: "/usr/bin/sysbox-runc"}},
	}
	// A runtime whose name merely contains sysbox is not Sysbox.
	lookalike := map[string]system.RuntimeWithStatus{
		"runc":             {Runtime: system.Runtime{Path: "runc"}},
		"sysbox-runc-fake": {Runtime: system.Runtime{Path: "/bin/true"}},
	}
	for _, tc := range []struct {
		name     string
		runtimes map[string]system.RuntimeWithStatus
		choice   string
		want     Baseline
		err      error  // errors.Is
		why      string // in the reason or the error
	}{
		{"auto without sysbox", runc, RuntimeAuto, BaselineCapabilities, nil, "lists no sysbox-runc (runtimes: io.containerd.runc.v2, runc)"},
		{"empty means auto", runc, "", BaselineCapabilities, nil, "lists no sysbox-runc"},
		{"auto with sysbox", withSysbox, RuntimeAuto, BaselineSysbox, nil, "lists sysbox-runc"},
		{"auto, no runtimes listed", nil, RuntimeAuto, BaselineCapabilities, nil, "none listed"},
		{"auto, a lookalike", lookalike, RuntimeAuto, BaselineCapabilities, nil, "sysbox-runc-fake"},
		{"sysbox required and present", withSysbox, RuntimeSysbox, BaselineSysbox, nil, "required"},
		{"sysbox required, absent", runc, RuntimeSysbox, "", ErrNoSysbox, "runtimes: io.containerd.runc.v2, runc"},
		{"sysbox required, lookalike", lookalike, RuntimeSysbox, "", ErrNoSysbox, "sysbox-runc-fake"},
		{"runc forced with sysbox", withSysbox, RuntimeRunc, BaselineCapabilities, nil, "not used"},
		{"runc forced without sysbox", runc, RuntimeRunc, BaselineCapabilities, nil, "forced"},
		{"unknown choice", withSysbox, "crun", "", nil, `"crun" is not one of auto, sysbox, runc`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := ChooseBaseline(tc.runtimes, tc.choice)
			if tc.want == "" {
				if err == nil || (tc.err != nil && !errors.Is(err, tc.err)) || !strings.Contains(err.Error(), tc.why) {
					t.Fatalf("= %q, %v; want an error (%v) containing %q", got, err, tc.err, tc.why)
				}
				return
			}
			if err != nil || got != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("= %q (%q), %v; want %q with a reason containing %q", got, why, err, tc.want, tc.why)
			}
		})
	}
}

// The Sysbox sidecar: the Sysbox runtime and nothing of the capability
// baseline (no added or dropped capabilities, no seccomp profile, no
// security options, no fresh cgroup2 mount), while the private cgroup
// namespace (and the entrypoint's check of it), the limits, the raw socket
// tmpfs and the mounts are the same.
func TestSpecSysbox(t *testing.T) {
	s := testSidecar()
	s.Baseline = BaselineSysbox
	cfg, host, err := s.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if host.Runtime != SysboxRuntime || host.Privileged {
		t.Errorf("runtime %q privileged %v", host.Runtime, host.Privileged)
	}
	if len(host.CapAdd) != 0 || len(host.CapDrop) != 0 || len(host.SecurityOpt) != 0 {
		t.Errorf("sysbox sidecar has capabilities/security options: add %v drop %v opts %d", host.CapAdd, host.CapDrop, len(host.SecurityOpt))
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
	script := cfg.Cmd[1]
	if !strings.Contains(script, "/proc/self/cgroup") || !strings.Contains(script, "exec dockerd") {
		t.Errorf("the sysbox entrypoint lost the cgroup namespace check or dockerd:\n%s", script)
	}
	if strings.Contains(script, "mount -t cgroup2") {
		t.Errorf("the sysbox entrypoint mounts a fresh cgroup2 hierarchy over Sysbox's:\n%s", script)
	}
	// Control: the same sidecar on the capability baseline (explicit and
	// the zero value) has exactly those, under runc.
	for _, b := range []Baseline{BaselineCapabilities, ""} {
		s.Baseline = b
		cfg, host, err := s.Spec()
		if err != nil {
			t.Fatal(err)
		}
		if host.Runtime != "runc" || !slices.Equal(host.CapAdd, Capabilities) || !slices.Equal(host.CapDrop, []string{"ALL"}) || len(host.SecurityOpt) != 2 || !strings.Contains(cfg.Cmd[1], "mount -t cgroup2") {
			t.Errorf("baseline %q: runtime %q add %v drop %v opts %d", b, host.Runtime, host.CapAdd, host.CapDrop, len(host.SecurityOpt))
		}
	}
	s.Baseline = "gvisor"
	if _, _, err := s.Spec(); err == nil {
		t.Error("an unknown baseline was accepted")
	}
}
