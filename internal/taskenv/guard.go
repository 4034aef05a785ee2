package taskenv

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"vak/internal/errclass"
	"vak/internal/paths"
)

// ErrForbiddenMount is wrapped by every refusal to mount a host path into a
// session: a Docker (or other daemon) socket, host credentials, vak's own
// config and state, or another workspace. The broker refuses these even when
// the request comes from trusted code: there is no override.
var ErrForbiddenMount = errclass.New(errclass.Invalid, "refusing to mount")

// MountError says which requested path was refused and why.
type MountError struct {
	// Path is the path as requested; Resolved is it with symlinks resolved.
	Path, Resolved string
	// Protected is the never-mounted path that Path is, contains or is inside.
	Protected string
	// What describes Protected ("host credentials (~/.ssh)", ...).
	What string
	// Relation is "is", "is inside" or "contains".
	Relation string
}

func (e *MountError) Error() string {
	p := fmt.Sprintf("%q", e.Path)
	if e.Resolved != "" && e.Resolved != e.Path {
		p += fmt.Sprintf(" (resolves to %q)", e.Resolved)
	}
	if e.Protected == "" {
		return fmt.Sprintf("%v %s: %s", ErrForbiddenMount, p, e.What)
	}
	return fmt.Sprintf("%v %s: it %s %s, %s, which is never mounted into a session", ErrForbiddenMount, p, e.Relation, e.Protected, e.What)
}

// Unwrap makes every *MountError match ErrForbiddenMount.
func (e *MountError) Unwrap() error { return ErrForbiddenMount }

// protectedPath is a host path no session may see, with why.
type protectedPath struct {
	path, what string
}

// credentialPaths are home-relative paths of host credentials (and the
// config files that point at them).
var credentialPaths = []struct{ rel, what string }{
	{".ssh", "host credentials (SSH keys)"},
	{".aws", "host credentials (AWS)"},
	{".azure", "host credentials (Azure)"},
	{".config/gcloud", "host credentials (Google Cloud)"},
	{".kube", "host credentials (Kubernetes)"},
	{".docker", "host credentials (Docker config and sockets)"},
	{".netrc", "host credentials (.netrc)"},
	{".gitconfig", "git configuration (credential helpers)"},
	{".git-credentials", "host credentials (git)"},
	{".config/git", "git configuration (credential helpers)"},
	{".config/gh", "host credentials (GitHub CLI)"},
	{".gnupg", "host credentials (GnuPG)"},
	{".npmrc", "host credentials (npm)"},
	{".pypirc", "host credentials (PyPI)"},
	{".cargo/credentials", "host credentials (Cargo)"},
	{".cargo/credentials.toml", "host credentials (Cargo)"},
	{".terraform.d", "host credentials (Terraform)"},
	{".password-store", "host credentials (pass)"},
	{".local/share/keyrings", "host credentials (keyrings)"},
	{".config/containers", "host credentials (container registries)"},
}

// daemonSockets are the well-known control sockets of container daemons.
var daemonSockets = []string{
	"/var/run/docker.sock", "/run/docker.sock",
	"/var/run/containerd", "/run/containerd",
	"/var/run/crio", "/run/crio",
	"/run/podman", "/var/run/podman",
	"/var/run/docker", "/run/docker",
}

// neverMount builds the list of host paths no session may see: daemon
// sockets (the well-known ones, DOCKER_HOST's and the rootless ones),
// credentials under home (and root's home), vak's config and state
// directories, and the workspaces in others (other sessions' workspaces).
func neverMount(home string, others []string) []protectedPath {
	var out []protectedPath
	for _, s := range daemonSockets {
		out = append(out, protectedPath{s, "a container daemon socket"})
	}
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "unix" && u.Path != "" {
		out = append(out, protectedPath{u.Path, "the Docker socket (DOCKER_HOST)"})
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		out = append(out, protectedPath{filepath.Join(d, "docker.sock"), "a rootless Docker socket"},
			protectedPath{filepath.Join(d, "docker"), "a rootless Docker daemon directory"},
			protectedPath{filepath.Join(d, "podman"), "a rootless Podman socket"})
	}
	homes := []string{"/root"}
	if home != "" && home != "/root" {
		homes = append(homes, home)
	}
	for _, h := range homes {
		for _, c := range credentialPaths {
			out = append(out, protectedPath{filepath.Join(h, c.rel), c.what})
		}
	}
	out = append(out, protectedPath{"/etc/shadow", "host password hashes"},
		protectedPath{"/etc/sudoers", "host sudo configuration"},
		protectedPath{"/etc/docker", "the Docker daemon's configuration"})
	for _, d := range []func() (string, error){paths.ConfigDir, paths.StateDir} {
		if p, err := d(); err == nil {
			out = append(out, protectedPath{p, "vak's own configuration or state"})
		}
	}
	for _, w := range others {
		out = append(out, protectedPath{w, "another session's workspace"})
	}
	// Each entry also under its resolved name (~/.ssh may be a symlink).
	n := len(out)
	for _, p := range out[:n] {
		if r, err := filepath.EvalSymlinks(p.path); err == nil && r != p.path {
			out = append(out, protectedPath{r, p.what})
		}
	}
	return out
}

// checkMount refuses a host path that is, contains or is inside a never-
// mounted path, looking at it both as written (with ".." resolved
// lexically) and with symlinks resolved, and refuses any socket. It returns
// the resolved path, which is what must be mounted.
func checkMount(p string, never []protectedPath) (string, error) {
	if !filepath.IsAbs(p) || strings.ContainsAny(p, "\x00\n") {
		return "", &MountError{Path: p, What: "not an absolute path"}
	}
	check := func(form, resolved string) error {
		if form == "/" {
			return &MountError{Path: p, Resolved: resolved, Protected: "/", Relation: "is", What: "the whole host filesystem"}
		}
		for _, n := range never {
			rel := ""
			switch {
			case form == n.path:
				rel = "is"
			case paths.Within(n.path, form):
				rel = "is inside"
			case paths.Within(form, n.path):
				rel = "contains"
			}
			if rel != "" {
				return &MountError{Path: p, Resolved: resolved, Protected: n.path, What: n.what, Relation: rel}
			}
		}
		return nil
	}
	// As written, with ".." taken lexically (what a reader of the request
	// sees) ...
	if err := check(filepath.Clean(p), ""); err != nil {
		return "", err
	}
	// ... and as the kernel resolves it (symlinks first, then "..").
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", &MountError{Path: p, What: fmt.Sprintf("cannot be resolved: %v", err)}
	}
	if err := check(resolved, resolved); err != nil {
		return "", err
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", &MountError{Path: p, Resolved: resolved, What: fmt.Sprintf("cannot be inspected: %v", err)}
	}
	if fi.Mode()&os.ModeSocket != 0 {
		return "", &MountError{Path: p, Resolved: resolved, What: "it is a socket; daemon sockets are never mounted into a session"}
	}
	if fi.Mode()&(os.ModeDevice|os.ModeCharDevice|os.ModeNamedPipe) != 0 {
		return "", &MountError{Path: p, Resolved: resolved, What: "it is a device or a pipe"}
	}
	if strings.HasPrefix(resolved+"/", ContainerVakDir+"/") {
		return "", &MountError{Path: p, Resolved: resolved, What: "it collides with vak's directory inside the container (" + ContainerVakDir + ")"}
	}
	return resolved, nil
}
