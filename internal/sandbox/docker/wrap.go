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
// The broker uses it through sandbox.Wrapper and, for vak run's one
// non-interactive command, sandbox.Runner: the same container (one runSpec
// renders both) created, attached, started and waited for through the
// Engine API from the broker's process instead of by the docker CLI, where
// the CLI would only be a client of the daemon the environment names
// (RunsHere). The lifeline is then copied into the attach stream, and the
// attach connection closing with the broker's process ends the container's
// stdin as the CLI's death does. Session-scoped task
// environments (long-lived containers driven through the Engine API) are
// package taskenv.
package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

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
	args, sp, err := b.runArgs(c)
	if err != nil {
		return nil, err
	}
	return append(args, sp.runArgv(c.Shell)...), nil
}

// runArgs is the docker run argv of c up to and including the image, and
// the spec it renders.
func (b *Backend) runArgs(c sandbox.Command) ([]string, runSpec, error) {
	sp, err := b.spec(c)
	if err != nil {
		return nil, sp, err
	}
	return sp.args(b.binary()), sp, nil
}

// MountCheck is the shell program that runs before a command container's
// init (LifelineInit, KeeperInit) when the container has protected paths
// mounted: the docker daemon follows symlinks in mount sources, so a
// protected path swapped for a link to something outside the workspace
// after vak checked it would be mounted in its place. Its arguments after
// the command ($1) are triples TYPE INODE PATH, one per protected or pinned
// mount, as vak saw them when it described the container: the path must
// not be a symlink, must be of TYPE (d or f) and, unless INODE is "-"
// (a runtime that numbers inodes itself, or a daemon on another machine),
// have that inode number (ls -di). Any difference ends the container with
// status 125 and a message before anything else runs; so does an image
// without ls where an inode is to be checked. It leaves the command as $1.
const MountCheck = `c=$1; shift; while [ "$#" -ge 3 ]; do i=-; if [ "$2" != - ]; then i=$(ls -di -- "$3" 2>/dev/null); i=${i#"${i%%[! ]*}"}; i=${i%% *}; fi; if [ -L "$3" ] || ! [ -"$1" "$3" ] || [ "$i" != "$2" ]; then echo "vak: $3 is not the file vak checked (was it replaced while the command started? or the image has no ls to check it); refusing to run" >&2; exit 125; fi; shift 3; done; set -- "$c"; `

// runArgv is the container's command for cmd: sh running LifelineInit
// with cmd as $1, behind MountCheck when sp has mounts to check.
func (sp runSpec) runArgv(cmd string) []string {
	if len(sp.checks) == 0 {
		return []string{"sh", "-c", LifelineInit, "vak-run", cmd}
	}
	return append([]string{"sh", "-c", MountCheck + LifelineInit, "vak-run", cmd}, sp.checks...)
}

// keeperArgv is an interactive command's container command: KeeperInit,
// behind MountCheck when sp has mounts to check.
func (sp runSpec) keeperArgv() []string {
	if len(sp.checks) == 0 {
		return []string{"sh", "-c", KeeperInit}
	}
	return append([]string{"sh", "-c", MountCheck + KeeperInit, "vak-run", ""}, sp.checks...)
}

// checkMount adds p, a protected or pinned path about to be bind-mounted,
// to sp's MountCheck triples: its type and, where the container sees the
// host's inode numbers (runc on a Linux host), its inode. A path that is
// no longer a directory or a regular file (a symlink now) is refused here.
func (sp *runSpec) checkMount(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("docker wrap: protected path %q: %w", p, err)
	}
	typ := "f"
	switch {
	case fi.IsDir():
		typ = "d"
	case !fi.Mode().IsRegular():
		return fmt.Errorf("docker wrap: %w: protected path %q is no longer a file or directory (%v); was it replaced?", ErrInvalidMountPath, p, fi.Mode().Type())
	}
	ino := "-"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && goruntime.GOOS == "linux" && sp.runtime == engine.DefaultRuntime {
		ino = strconv.FormatUint(uint64(st.Ino), 10)
	}
	sp.checks = append(sp.checks, typ, ino, p)
	return nil
}

// runSpec is the container that runs one command: Wrap renders it as
// docker run flags (runSpec.args), Run as the Engine API request the
// docker CLI would send for them (runSpec.create). It is the one
// description of that container; the two renderings are checked against
// each other by a test that records what the CLI sends.
type runSpec struct {
	name, image, netMode, workdir, user string
	runtime                             string // the OCI runtime the container names (Backend.runtime)
	memory                              int64
	cpus                                float64
	pids                                int64
	seccompPath                         string // "" without a profile (off Linux)
	readOnly                            bool
	wsBind                              string   // the workspace, SRC:DST[:ro]
	pinBinds, roBinds                   []string // protected paths
	netBinds                            []string // the proxied network's (read-only)
	homeBind                            string   // the persistent home, if any
	tmpfs                               string   // /tmp's mount options
	env                                 []string
	labels                              []string // KEY=VALUE, in order
	checks                              []string // MountCheck's triples
}

// spec checks c and describes its container.
func (b *Backend) spec(c sandbox.Command) (runSpec, error) {
	var sp runSpec
	if !c.Mode.Restricted() {
		if c.Mode == sandbox.FullAccess {
			return sp, ErrFullAccess
		}
		return sp, fmt.Errorf("docker wrap: %w: %v", sandbox.ErrUnknownMode, c.Mode)
	}
	if c.ID == "" {
		return sp, fmt.Errorf("docker wrap: %w", ErrNoID)
	}
	ws := c.Workspace
	if !filepath.IsAbs(ws) || filepath.Clean(ws) != ws || ws == "/" {
		return sp, fmt.Errorf("docker wrap: %w: %q", ErrNotAbsolute, ws)
	}
	// A bind spec is colon-separated; a comma would break --mount. Refuse
	// rather than mis-mount.
	if strings.ContainsAny(ws, ":,\x00\n") {
		return sp, fmt.Errorf("docker wrap: %w: %q contains ':' ',' or a control character", ErrInvalidMountPath, ws)
	}
	dir := c.Dir
	if dir == "" {
		dir = ws
	}
	if !within(ws, dir) {
		return sp, fmt.Errorf("docker wrap: %w: %q not in %q", ErrDirOutside, dir, ws)
	}
	home := ContainerHome
	if c.AgentHome != "" {
		if !filepath.IsAbs(c.AgentHome) || filepath.Clean(c.AgentHome) != c.AgentHome || strings.ContainsAny(c.AgentHome, ":,\x00\n") {
			return sp, fmt.Errorf("docker wrap: %w: home %q", ErrInvalidMountPath, c.AgentHome)
		}
		if within(PersistentHome, ws) || within(ws, PersistentHome) {
			return sp, fmt.Errorf("docker wrap: %w: the workspace %q overlaps the container's home %s", ErrInvalidMountPath, ws, PersistentHome)
		}
		home = PersistentHome
		sp.homeBind = c.AgentHome + ":" + PersistentHome
	}
	lim := c.Limits.WithDefaults()
	sp.image = b.Image
	if sp.image == "" {
		sp.image = DefaultImage
	}
	sp.runtime = b.runtime()
	if err := b.CheckNetwork(c.Network != nil); err != nil {
		return sp, fmt.Errorf("docker wrap: %w", err)
	}
	sp.netMode = "none"
	if c.Network != nil {
		if !strings.HasPrefix(c.Network.Mode, "container:") {
			return sp, fmt.Errorf("docker wrap: network mode %q: a sandbox joins a netclient (container:NAME) or has none", c.Network.Mode)
		}
		sp.netMode = c.Network.Mode
	}
	if path, err := SeccompFile(); err == nil {
		sp.seccompPath = path
	} else if !errors.Is(err, engine.ErrUnsupported) {
		return sp, fmt.Errorf("docker wrap: %w", err)
	}
	sp.memory, sp.cpus, sp.pids = lim.Memory, lim.CPUs, int64(lim.Pids)
	sp.wsBind = ws + ":" + ws
	if c.Mode == sandbox.ReadOnly {
		sp.readOnly = true
		sp.wsBind += ":ro"
	}
	for _, p := range c.Protection.Pin {
		if !within(ws, p) || p == ws || strings.ContainsAny(p, ":,\x00\n") {
			return sp, fmt.Errorf("docker wrap: %w: pinned path %q", ErrInvalidMountPath, p)
		}
		if c.Mode == sandbox.WorkspaceWrite {
			sp.pinBinds = append(sp.pinBinds, p+":"+p)
			if err := sp.checkMount(p); err != nil {
				return sp, err
			}
		}
	}
	for _, p := range c.Protection.ReadOnly {
		if !within(ws, p) || p == ws || strings.ContainsAny(p, ":,\x00\n") {
			return sp, fmt.Errorf("docker wrap: %w: protected path %q", ErrInvalidMountPath, p)
		}
		if c.Mode == sandbox.WorkspaceWrite {
			sp.roBinds = append(sp.roBinds, p+":"+p+":ro")
			if err := sp.checkMount(p); err != nil {
				return sp, err
			}
		}
	}
	sp.tmpfs = "rw,nosuid,nodev,exec,size=" + strconv.FormatInt(lim.TmpfsSize, 10)
	sp.workdir = dir
	sp.user = strconv.Itoa(b.User.UID) + ":" + strconv.Itoa(b.User.GID)
	if b.User.Root {
		sp.user = "0:0"
	}
	sp.env = []string{"HOME=" + home, "TMPDIR=/tmp"}
	if c.Network != nil {
		for _, bind := range c.Network.Binds {
			if !strings.HasSuffix(bind, ":ro") {
				return sp, fmt.Errorf("docker wrap: network bind %q must be read-only", bind)
			}
			sp.netBinds = append(sp.netBinds, bind)
		}
		sp.env = append(sp.env, c.Network.Env...)
	}
	for _, kv := range c.Env {
		if !strings.Contains(kv, "=") || strings.HasPrefix(kv, "=") {
			return sp, fmt.Errorf("docker wrap: environment entry %q is not KEY=VALUE", kv)
		}
		sp.env = append(sp.env, kv)
	}
	sp.name = ContainerName(c.ID)
	sp.labels = []string{
		engine.LabelManaged + "=true",
		engine.LabelKind + "=run",
		engine.LabelRunID + "=" + c.ID,
		engine.LabelWorkspace + "=" + ws,
		engine.LabelOwner + "=" + strconv.Itoa(os.Getuid()),
	}
	if tok, err := ownToken(); err == nil {
		sp.labels = append(sp.labels, engine.LabelOwnerProc+"="+tok)
	} else if !errors.Is(err, engine.ErrUnsupported) {
		return sp, fmt.Errorf("docker wrap: %w", err)
	}
	for _, k := range sortedKeys(b.Labels) {
		sp.labels = append(sp.labels, k+"="+b.Labels[k])
	}
	if c.Network != nil {
		for _, k := range sortedKeys(c.Network.Labels) {
			sp.labels = append(sp.labels, k+"="+c.Network.Labels[k])
		}
	}
	return sp, nil
}

// args renders sp as the docker run argv (binary first) up to and
// including the image.
func (sp runSpec) args(binary string) []string {
	args := []string{binary, "run", "-i", "--rm",
		"--network", sp.netMode,
		"--memory", strconv.FormatInt(sp.memory, 10),
		"--cpus", strconv.FormatFloat(sp.cpus, 'f', -1, 64),
		"--pids-limit", strconv.FormatInt(sp.pids, 10),
		"--cap-drop", "ALL",
		"--security-opt", "no-new-privileges",
	}
	args = append(args, "--runtime", sp.runtime)
	if sp.seccompPath != "" {
		args = append(args, "--security-opt", "seccomp="+sp.seccompPath)
	}
	if sp.readOnly {
		args = append(args, "--read-only")
	}
	args = append(args, "-v", sp.wsBind)
	for _, v := range slices.Concat(sp.pinBinds, sp.roBinds) {
		args = append(args, "-v", v)
	}
	args = append(args, "--tmpfs", "/tmp:"+sp.tmpfs, "-w", sp.workdir, "--user", sp.user)
	for _, v := range sp.netBinds {
		args = append(args, "-v", v)
	}
	if sp.homeBind != "" {
		args = append(args, "-v", sp.homeBind)
	}
	for _, kv := range sp.env {
		args = append(args, "-e", kv)
	}
	args = append(args, "--name", sp.name)
	for _, l := range sp.labels {
		args = append(args, "--label", l)
	}
	return append(args, sp.image)
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
