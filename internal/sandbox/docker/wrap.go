// Package docker is vak's Docker sandbox backend: command-scoped, it wraps
// one tool command in a throwaway container:
//
//	docker run -i --rm --network none --memory 2g --cpus 2 --pids-limit 256 \
//	  --cap-drop ALL --security-opt no-new-privileges \
//	  --security-opt seccomp=PROFILE [--read-only] \
//	  -v WS:WS[:ro] [-v PIN:PIN ...] [-v PROTECTED:PROTECTED:ro ...] \
//	  --tmpfs /tmp:rw,nosuid,nodev,exec,size=N -w DIR \
//	  --user UID:GID [-v HOMEDIR:/home/vak] -e HOME=/tmp|/home/vak -e TMPDIR=/tmp \
//	  --name vak-run-ID --label ... \
//	  IMAGE sh -c LIFELINE vak-run 'COMMAND'
//
// The workspace is bind-mounted at its own canonical absolute path, so the
// host file tools and the containerised shell see one path. ReadOnly adds
// --read-only and mounts the workspace :ro. Both modes get only the bounded
// private /tmp as scratch. By default the container runs as the invoking
// user's uid:gid, so files it writes into the workspace belong to that user.
//
// The container's init is LifelineInit: it runs the command with stdin
// /dev/null and reads its own stdin, which the docker CLI (-i) forwards from
// the broker's lifeline pipe. When the broker dies, or the CLI is killed,
// that stdin reaches EOF and the init kills every process of the container,
// so a command never outlives its supervisor. The container carries its
// owner's uid and process (vak.owner, vak.owner.pid) so that `vak gc` can
// remove one whose owner is gone.
//
// The broker uses it only through sandbox.Wrapper. Session-scoped task
// environments (long-lived containers driven through the Engine API) are
// package taskenv.
package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"vak/internal/engine"
	"vak/internal/sandbox"
)

// DefaultImage is the image used when config names none.
const DefaultImage = "alpine:3.20"

// ContainerHome is HOME inside the container: on the private tmpfs, so it is
// writable in every mode and vanishes with the container.
const ContainerHome = "/tmp"

// PersistentHome is HOME inside the container when the command has a
// persistent home (sandbox.Command.Home): that host directory is bound
// here read-write, in every mode. A workspace at or below it is refused.
const PersistentHome = "/home/vak"

// LifelineInit is the shell program that is the init (PID 1) of every
// command container: it starts the command ($1) with stdin /dev/null, waits
// for it and exits with its status; a background reader (handed the init's
// stdin explicitly: sh gives background jobs /dev/null) ends at EOF of the
// lifeline and then kills every process it can (kill -1:
// all but itself and the init), which ends the wait. Shell built-ins only,
// so any image with a POSIX sh works.
const LifelineInit = `exec 3<&0; sh -c "$1" </dev/null 3<&- & c=$!; { while read -r _; do :; done; kill -KILL -1; } <&3 3<&- & exec 3<&-; wait "$c"`

// NamePrefix prefixes the names of command-scoped containers.
const NamePrefix = "vak-run-"

// User says which identity the container runs as.
type User struct {
	// Root runs the container as uid 0 (explicit opt-in in config).
	Root bool
	// UID and GID are the host identity to map to (the invoking user's).
	UID, GID int
}

// Spec is the user as docker's --user takes it ("UID:GID").
func (u User) Spec() string {
	if u.Root {
		return "0:0"
	}
	return strconv.Itoa(u.UID) + ":" + strconv.Itoa(u.GID)
}

// IDs are the uid and gid processes in the container run as.
func (u User) IDs() (int, int) {
	if u.Root {
		return 0, 0
	}
	return u.UID, u.GID
}

// Sentinel errors of Wrap.
var (
	ErrNotAbsolute      = errors.New("workspace must be an absolute, canonical path")
	ErrDirOutside       = errors.New("working directory is outside the workspace")
	ErrFullAccess       = errors.New("full-access commands are not sandboxed and never reach the docker backend")
	ErrNoID             = errors.New("command has no ID")
	ErrInvalidMountPath = errors.New("path cannot be bind-mounted")
)

// ContainerName is the name of the container that runs the command with id.
func ContainerName(id string) string { return NamePrefix + id }

// Wrap returns the docker run argv for c. The first element is b.Binary
// (default "docker"). Run it with a stdin that stays open as long as the
// command may run and closes when its supervisor dies (the lifeline, see
// LifelineInit): with /dev/null as stdin the command is killed at once.
func (b *Backend) Wrap(c sandbox.Command) ([]string, error) {
	args, err := b.runArgs(c)
	if err != nil {
		return nil, err
	}
	return append(args, "sh", "-c", LifelineInit, "vak-run", c.Shell), nil
}

// runArgs is the docker run argv of c up to and including the image.
func (b *Backend) runArgs(c sandbox.Command) ([]string, error) {
	if !c.Mode.Restricted() {
		if c.Mode == sandbox.FullAccess {
			return nil, ErrFullAccess
		}
		return nil, fmt.Errorf("docker wrap: %w: %v", sandbox.ErrUnknownMode, c.Mode)
	}
	if c.ID == "" {
		return nil, fmt.Errorf("docker wrap: %w", ErrNoID)
	}
	ws := c.Workspace
	if !filepath.IsAbs(ws) || filepath.Clean(ws) != ws || ws == "/" {
		return nil, fmt.Errorf("docker wrap: %w: %q", ErrNotAbsolute, ws)
	}
	// A bind spec is colon-separated; a comma would break --mount. Refuse
	// rather than mis-mount.
	if strings.ContainsAny(ws, ":,\x00\n") {
		return nil, fmt.Errorf("docker wrap: %w: %q contains ':' ',' or a control character", ErrInvalidMountPath, ws)
	}
	dir := c.Dir
	if dir == "" {
		dir = ws
	}
	if !within(ws, dir) {
		return nil, fmt.Errorf("docker wrap: %w: %q not in %q", ErrDirOutside, dir, ws)
	}
	home := ContainerHome
	if c.AgentHome != "" {
		if !filepath.IsAbs(c.AgentHome) || filepath.Clean(c.AgentHome) != c.AgentHome || strings.ContainsAny(c.AgentHome, ":,\x00\n") {
			return nil, fmt.Errorf("docker wrap: %w: home %q", ErrInvalidMountPath, c.AgentHome)
		}
		if within(PersistentHome, ws) || within(ws, PersistentHome) {
			return nil, fmt.Errorf("docker wrap: %w: the workspace %q overlaps the container's home %s", ErrInvalidMountPath, ws, PersistentHome)
		}
		home = PersistentHome
	}
	lim := c.Limits.WithDefaults()
	image := b.Image
	if image == "" {
		image = DefaultImage
	}

	netMode := "none"
	if c.Network != nil {
		if !strings.HasPrefix(c.Network.Mode, "container:") {
			return nil, fmt.Errorf("docker wrap: network mode %q: a sandbox joins a netclient (container:NAME) or has none", c.Network.Mode)
		}
		netMode = c.Network.Mode
	}
	seccompOpt := ""
	if path, err := SeccompFile(); err == nil {
		seccompOpt = "seccomp=" + path
	} else if !errors.Is(err, engine.ErrUnsupported) {
		return nil, fmt.Errorf("docker wrap: %w", err)
	}
	args := []string{b.binary(), "run", "-i", "--rm",
		"--network", netMode,
		"--memory", strconv.FormatInt(lim.Memory, 10),
		"--cpus", strconv.FormatFloat(lim.CPUs, 'f', -1, 64),
		"--pids-limit", strconv.Itoa(lim.Pids),
		"--cap-drop", "ALL",
		"--security-opt", "no-new-privileges",
	}
	if seccompOpt != "" {
		args = append(args, "--security-opt", seccompOpt)
	}
	vol := ws + ":" + ws
	if c.Mode == sandbox.ReadOnly {
		args = append(args, "--read-only")
		vol += ":ro"
	}
	args = append(args, "-v", vol)
	for _, p := range c.Protection.Pin {
		if !within(ws, p) || p == ws || strings.ContainsAny(p, ":,\x00\n") {
			return nil, fmt.Errorf("docker wrap: %w: pinned path %q", ErrInvalidMountPath, p)
		}
		if c.Mode == sandbox.WorkspaceWrite {
			args = append(args, "-v", p+":"+p)
		}
	}
	for _, p := range c.Protection.ReadOnly {
		if !within(ws, p) || p == ws || strings.ContainsAny(p, ":,\x00\n") {
			return nil, fmt.Errorf("docker wrap: %w: protected path %q", ErrInvalidMountPath, p)
		}
		if c.Mode == sandbox.WorkspaceWrite {
			args = append(args, "-v", p+":"+p+":ro")
		}
	}
	args = append(args,
		"--tmpfs", "/tmp:rw,nosuid,nodev,exec,size="+strconv.FormatInt(lim.TmpfsSize, 10),
		"-w", dir,
	)
	if b.User.Root {
		args = append(args, "--user", "0:0")
	} else {
		args = append(args, "--user", strconv.Itoa(b.User.UID)+":"+strconv.Itoa(b.User.GID))
	}
	if c.Network != nil {
		for _, bind := range c.Network.Binds {
			if !strings.HasSuffix(bind, ":ro") {
				return nil, fmt.Errorf("docker wrap: network bind %q must be read-only", bind)
			}
			args = append(args, "-v", bind)
		}
	}
	if c.AgentHome != "" {
		args = append(args, "-v", c.AgentHome+":"+PersistentHome)
	}
	args = append(args, "-e", "HOME="+home, "-e", "TMPDIR=/tmp")
	if c.Network != nil {
		for _, kv := range c.Network.Env {
			args = append(args, "-e", kv)
		}
	}
	for _, kv := range c.Env {
		if !strings.Contains(kv, "=") || strings.HasPrefix(kv, "=") {
			return nil, fmt.Errorf("docker wrap: environment entry %q is not KEY=VALUE", kv)
		}
		args = append(args, "-e", kv)
	}
	args = append(args, "--name", ContainerName(c.ID),
		"--label", engine.LabelManaged+"=true",
		"--label", engine.LabelKind+"=run",
		"--label", engine.LabelRunID+"="+c.ID,
		"--label", engine.LabelWorkspace+"="+ws,
		"--label", engine.LabelOwner+"="+strconv.Itoa(os.Getuid()),
	)
	if tok, err := ownToken(); err == nil {
		args = append(args, "--label", engine.LabelOwnerProc+"="+tok)
	} else if !errors.Is(err, engine.ErrUnsupported) {
		return nil, fmt.Errorf("docker wrap: %w", err)
	}
	for _, k := range sortedKeys(b.Labels) {
		args = append(args, "--label", k+"="+b.Labels[k])
	}
	if c.Network != nil {
		for _, k := range sortedKeys(c.Network.Labels) {
			args = append(args, "--label", k+"="+c.Network.Labels[k])
		}
	}
	args = append(args, image)
	return args, nil
}

// ownToken is engine.OwnerToken of this process, read once.
var ownToken = sync.OnceValues(func() (string, error) { return engine.OwnerToken(os.Getpid()) })

// within reports whether p is root or below it; both must be clean and absolute.
func within(root, p string) bool {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return false
	}
	return p == root || strings.HasPrefix(p, root+"/")
}
