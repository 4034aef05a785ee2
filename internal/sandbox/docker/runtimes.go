package docker

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/system"
)

// Runtime is an OCI runtime as the Docker Engine lists it (`docker info`,
// "Runtimes"): a runc-compatible binary with the flags the daemon passes
// it, or a containerd shim type.
type Runtime struct {
	Name string
	Path string   // the binary of a runc-compatible runtime
	Args []string // its runtimeArgs, given before every command
	Type string   // a shim v2 runtime's type (io.containerd.runsc.v1, ...)
}

// RuntimeFrom is the runtime name as the Engine's info lists it, and
// whether it lists it.
func RuntimeFrom(info system.Info, name string) (Runtime, bool) {
	r, ok := info.Runtimes[name]
	if !ok {
		return Runtime{Name: name}, false
	}
	return Runtime{Name: name, Path: r.Path, Args: slices.Clone(r.Args), Type: r.Type}, true
}

// RuntimeNames are the names of the runtimes the Engine lists, sorted.
func RuntimeNames(info system.Info) []string {
	names := make([]string, 0, len(info.Runtimes))
	for n := range info.Runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Runc says r is the Engine's runc (what containers run under when no
// runtime is named).
func (r Runtime) Runc() bool {
	return r.Name == "runc" || r.Type == "io.containerd.runc.v2" || (r.Type == "" && filepath.Base(r.Path) == "runc")
}

// GVisor says r is gVisor's runsc: a binary named runsc (runsc-*) or its
// containerd shim.
func (r Runtime) GVisor() bool {
	return strings.HasPrefix(filepath.Base(r.Path), "runsc") || strings.Contains(r.Type, "runsc")
}

// flag is the value of runsc's flag name in r.Args ("--name=value",
// "-name=value", "--name value"), and whether it is there; the last one
// given wins, as with Go's flag package.
func (r Runtime) flag(name string) (string, bool) {
	val, found := "", false
	for i := 0; i < len(r.Args); i++ {
		a := strings.TrimPrefix(strings.TrimPrefix(r.Args[i], "-"), "-")
		if a == r.Args[i] {
			continue // not a flag
		}
		k, v, hasValue := strings.Cut(a, "=")
		if k != name {
			continue
		}
		if !hasValue && i+1 < len(r.Args) {
			i++
			v = r.Args[i]
		}
		val, found = v, true
	}
	return val, found
}

// HostUDS says gVisor lets the sandbox create unix sockets the host can
// connect to (runsc --host-uds=create or all): a session worker listens on
// one in a bind-mounted directory.
func (r Runtime) HostUDS() bool {
	v, _ := r.flag("host-uds")
	return v == "create" || v == "all"
}

// OverlayNone says gVisor writes the container's root filesystem through
// to the host (runsc --overlay2=none) instead of an overlay of its own,
// which `docker commit` would not see.
func (r Runtime) OverlayNone() bool {
	v, _ := r.flag("overlay2")
	return v == "none"
}
