package dockerd

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/system"
)

// Every config value against every kind of runtime list: "auto" (and
// empty) never picks Sysbox, even where the Engine lists it (untested with
// the netclient's shared network namespace, nestybox/sysbox issue 518);
// "sysbox" picks it where listed and otherwise fails closed naming the
// runtimes; "runc" never picks it; any other value is refused. The
// expectations are written out per cell, not derived from the code.
func TestChooseBaseline(t *testing.T) {
	runtimes := map[string]map[string]system.RuntimeWithStatus{
		"none listed": nil,
		"runc": {
			"runc":                  {Runtime: system.Runtime{Path: "runc"}},
			"io.containerd.runc.v2": {Runtime: system.Runtime{Type: "io.containerd.runc.v2"}},
		},
		"runc+sysbox": {
			"runc":        {Runtime: system.Runtime{Path: "runc"}},
			SysboxRuntime: {Runtime: system.Runtime{Path: "/usr/bin/sysbox-runc"}},
		},
		"sysbox only": {
			SysboxRuntime: {Runtime: system.Runtime{Path: "/usr/bin/sysbox-runc"}},
		},
		// A runtime whose name merely contains sysbox is not Sysbox.
		"lookalike": {
			"runc":             {Runtime: system.Runtime{Path: "runc"}},
			"sysbox-runc-fake": {Runtime: system.Runtime{Path: "/bin/true"}},
		},
	}
	type want struct {
		b   Baseline // "" = an error
		err error    // errors.Is, for errors
		why string   // in the reason or the error
	}
	capsNo := func(listed string) want {
		return want{BaselineCapabilities, nil, "docker info lists no sysbox-runc (runtimes: " + listed + ")"}
	}
	capsNotUsed := want{BaselineCapabilities, nil, `docker info lists sysbox-runc, not used: "auto" takes Sysbox only when asked for`}
	noSysbox := func(listed string) want {
		return want{"", ErrNoSysbox, "(runtimes: " + listed + "); install and register Sysbox, or set session.docker_runtime"}
	}
	sysboxOK := want{BaselineSysbox, nil, "required by the configuration; docker info lists sysbox-runc"}
	forced := want{BaselineCapabilities, nil, "forced by the configuration"}
	forcedNotUsed := want{BaselineCapabilities, nil, "forced by the configuration (docker info lists sysbox-runc, not used)"}
	unknown := want{"", nil, `runtime choice "crun" is not one of auto, sysbox, runc`}
	table := map[string]map[string]want{
		"none listed": {"": capsNo("none listed"), "auto": capsNo("none listed"), "sysbox": noSysbox("none listed"), "runc": forced, "crun": unknown},
		"runc":        {"": capsNo("io.containerd.runc.v2, runc"), "auto": capsNo("io.containerd.runc.v2, runc"), "sysbox": noSysbox("io.containerd.runc.v2, runc"), "runc": forced, "crun": unknown},
		"runc+sysbox": {"": capsNotUsed, "auto": capsNotUsed, "sysbox": sysboxOK, "runc": forcedNotUsed, "crun": unknown},
		"sysbox only": {"": capsNotUsed, "auto": capsNotUsed, "sysbox": sysboxOK, "runc": forcedNotUsed, "crun": unknown},
		"lookalike":   {"": capsNo("runc, sysbox-runc-fake"), "auto": capsNo("runc, sysbox-runc-fake"), "sysbox": noSysbox("runc, sysbox-runc-fake"), "runc": forced, "crun": unknown},
	}
	for rname, rts := range runtimes {
		for _, choice := range []string{"", RuntimeAuto, RuntimeSysbox, RuntimeRunc, "crun"} {
			w, ok := table[rname][choice]
			if !ok {
				t.Fatalf("no expectation for %s x %q", rname, choice)
			}
			t.Run(rname+"/"+choice, func(t *testing.T) {
				got, why, err := ChooseBaseline(rts, choice)
				if w.b == "" {
					if err == nil || (w.err != nil && !errors.Is(err, w.err)) || !strings.Contains(err.Error(), w.why) {
						t.Fatalf("= %q, %v; want an error (%v) containing %q", got, err, w.err, w.why)
					}
					return
				}
				if err != nil || got != w.b || !strings.Contains(why, w.why) {
					t.Fatalf("= %q (%q), %v; want %q with a reason containing %q", got, why, err, w.b, w.why)
				}
			})
		}
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
