package sandbox

import (
	"errors"
	"fmt"
	"runtime"
)

// Name is a requested backend name as written in config or on the command line.
type Name string

// Backend names.
const (
	Auto     Name = "auto"
	Landlock Name = "landlock"
	Seatbelt Name = "seatbelt"
	Docker   Name = "docker"
	None     Name = "none"
)

// Names lists every backend name in a stable order (for help and doctor).
var Names = []Name{Auto, Landlock, Seatbelt, Docker, None}

// Sentinel errors of resolution.
var (
	// ErrUnknownBackend reports a backend name vak does not know.
	ErrUnknownBackend = errors.New("unknown sandbox backend")
	// ErrNoNativeBackend reports a platform with no native process sandbox.
	ErrNoNativeBackend = errors.New("this platform has no native sandbox backend")
	// ErrNoneRestricted reports backend "none" requested for a restricted
	// mode: none provides no isolation, so it is only valid with full-access.
	ErrNoneRestricted = errors.New(`backend "none" provides no isolation; it is only valid with mode full-access`)
	// ErrNotRegistered reports a backend that resolution chose but that this
	// build does not provide.
	ErrNotRegistered = errors.New("sandbox backend not available in this build")
)

// ParseName validates a backend name.
func ParseName(s string) (Name, error) {
	for _, n := range Names {
		if string(n) == s {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w %q (want auto, landlock, seatbelt, docker or none)", ErrUnknownBackend, s)
}

// NativeFor is the platform's native process-scoped backend, or "" if none.
func NativeFor(goos string) Name {
	switch goos {
	case "linux":
		return Landlock
	case "darwin":
		return Seatbelt
	}
	return ""
}

// Resolution explains how a requested backend became the effective one.
type Resolution struct {
	Requested Name
	Effective Name
	// Reason is a short human explanation (shown by vak doctor).
	Reason string
}

// ResolveName applies vak's resolution rules without touching any backend:
//
//   - mode full-access disables sandboxing: the effective backend is none;
//   - none with a restricted mode is an error (never a silent weakening);
//   - auto is the platform's native backend;
//   - landlock or seatbelt on a platform that lacks it falls back to the
//     platform's native backend, never to none;
//   - docker is docker on every platform.
func ResolveName(req Name, mode Mode, goos string) (Resolution, error) {
	if _, err := ParseName(string(req)); err != nil {
		return Resolution{}, err
	}
	r := Resolution{Requested: req}
	if mode == FullAccess {
		r.Effective, r.Reason = None, "mode full-access disables sandboxing"
		return r, nil
	}
	if !mode.Restricted() {
		return Resolution{}, fmt.Errorf("%w: %v", ErrUnknownMode, mode)
	}
	native := NativeFor(goos)
	switch req {
	case None:
		return Resolution{}, ErrNoneRestricted
	case Docker:
		r.Effective, r.Reason = Docker, "requested"
		return r, nil
	case Auto:
		if native == "" {
			return Resolution{}, fmt.Errorf("%w (%s); use backend docker", ErrNoNativeBackend, goos)
		}
		r.Effective, r.Reason = native, "auto selects the native backend on "+goos
		return r, nil
	case Landlock, Seatbelt:
		if native == "" {
			return Resolution{}, fmt.Errorf("%w (%s): %s unavailable; use backend docker", ErrNoNativeBackend, goos, req)
		}
		r.Effective = native
		if native == req {
			r.Reason = "requested"
		} else {
			r.Reason = fmt.Sprintf("%s does not exist on %s; using the platform's native backend %s", req, goos, native)
		}
		return r, nil
	}
	return Resolution{}, fmt.Errorf("%w %q", ErrUnknownBackend, req)
}

// Registry holds the backends this build provides, by name.
type Registry struct {
	GOOS     string // platform to resolve for; empty means runtime.GOOS
	backends map[Name]Backend
	missing  map[Name]error
}

// NewRegistry returns an empty registry for the running platform.
func NewRegistry() *Registry {
	return &Registry{backends: map[Name]Backend{}, missing: map[Name]error{}}
}

// Register adds a backend under its name.
func (r *Registry) Register(b Backend) { r.backends[Name(b.Name())] = b }

// All returns the registered backends in the order of Names.
func (r *Registry) All() []Backend {
	var all []Backend
	for _, n := range Names {
		if b, ok := r.backends[n]; ok {
			all = append(all, b)
		}
	}
	return all
}

// Unavailable records that a backend is known but cannot be provided by this
// build, and why (the error resolution returns for it).
func (r *Registry) Unavailable(n Name, err error) { r.missing[n] = err }

// Get returns the registered backend for n.
func (r *Registry) Get(n Name) (Backend, error) {
	if b, ok := r.backends[n]; ok {
		return b, nil
	}
	if err, ok := r.missing[n]; ok {
		return nil, fmt.Errorf("sandbox backend %s: %w", n, err)
	}
	return nil, fmt.Errorf("%w: %s", ErrNotRegistered, n)
}

// Resolve resolves req for mode and returns the effective backend.
func (r *Registry) Resolve(req Name, mode Mode) (Backend, Resolution, error) {
	goos := r.GOOS
	if goos == "" {
		goos = runtime.GOOS
	}
	res, err := ResolveName(req, mode, goos)
	if err != nil {
		return nil, Resolution{}, err
	}
	b, err := r.Get(res.Effective)
	if err != nil {
		return nil, res, err
	}
	return b, res, nil
}

// ErrNotYetAvailable marks a backend vak knows but this build does not
// implement yet. Resolving to it is an error, never a fallback to none.
var ErrNotYetAvailable = errors.New("not yet available in this build")
