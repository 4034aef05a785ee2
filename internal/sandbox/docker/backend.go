package docker

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/sandbox"
)

// Probe defaults.
const (
	DefaultProbeTTL     = 30 * time.Second
	DefaultProbeTimeout = 10 * time.Second
)

// Backend is the command-scoped Docker backend.
type Backend struct {
	// Image runs the commands; empty means DefaultImage.
	Image string
	// User is the container identity.
	User User
	// Runtime is the OCI runtime the daemon runs the containers with (a
	// name docker info lists, e.g. "runsc" for gVisor); empty means
	// engine.DefaultRuntime (runc), which every container then names,
	// whatever the daemon's own default is.
	Runtime string
	// Binary is the docker CLI; empty means "docker" from PATH.
	Binary string
	// Labels are extra labels for every container (tests add vak.test=1).
	Labels map[string]string
	// Probe caches daemon availability; nil means a private default probe.
	Probe *Probe

	once sync.Once
	// cli is the Engine API client of Runner, made on first use.
	cliOnce sync.Once
	cli     *engine.Client
	cliErr  error
}

// New returns a backend running image as the invoking user.
func New(image string) *Backend {
	return &Backend{Image: image, User: User{UID: os.Getuid(), GID: os.Getgid()}}
}

var _ sandbox.Wrapper = (*Backend)(nil)

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return string(sandbox.Docker) }

// Scope implements sandbox.Backend.
func (b *Backend) Scope() sandbox.Scope { return sandbox.ScopeCommand }

// Available implements sandbox.Backend with a cached probe of the daemon:
// its version through the Engine API where vak run's commands take that
// path (RunsHere), else `docker version`, the CLI's own view; with a
// Runtime, also that the daemon lists it (ErrNoRuntime). The seccomp
// profile every Wrap needs (about a millisecond of JSON) is built
// meanwhile.
func (b *Backend) Available(ctx context.Context) error {
	go buildSeccomp()
	p := b.probe()
	if b.RunsHere() {
		return p.check(ctx, &engineAPI{version: b.serverVersion, runtimes: b.serverRuntimes})
	}
	return p.Check(ctx)
}

// serverVersion asks the daemon its version through the Engine API.
func (b *Backend) serverVersion(ctx context.Context) (string, error) {
	cli, err := b.engine()
	if err != nil {
		return "", err
	}
	v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return "", engine.APIError("", err)
	}
	return v.Version, nil
}

// serverRuntimes asks the daemon the runtimes it lists (docker info)
// through the Engine API.
func (b *Backend) serverRuntimes(ctx context.Context) ([]string, error) {
	cli, err := b.engine()
	if err != nil {
		return nil, err
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, engine.APIError("", err)
	}
	return RuntimeNames(info.Info), nil
}

// Invalidate forgets a cached success, e.g. after a command failed in a way
// that suggests the daemon went away.
func (b *Backend) Invalidate() { b.probe().Invalidate() }

func (b *Backend) probe() *Probe {
	b.once.Do(func() {
		if b.Probe == nil {
			b.Probe = &Probe{Binary: b.binary()}
		}
		// The probe checks the runtime the containers will name.
		b.Probe.Runtime = b.Runtime
	})
	return b.Probe
}

func (b *Backend) binary() string {
	if b.Binary != "" {
		return b.Binary
	}
	return "docker"
}

// Remove force-removes the container of the command with id (SIGKILL, then
// delete). It is how timeouts and interrupts make sure nothing is orphaned.
// A container that does not exist is not an error.
func (b *Backend) Remove(ctx context.Context, id string) error {
	for {
		out, err := exec.CommandContext(ctx, b.binary(), "rm", "-f", ContainerName(id)).CombinedOutput()
		low := bytes.ToLower(out)
		switch {
		case err == nil || bytes.Contains(low, []byte("no such container")):
			return nil
		case bytes.Contains(low, []byte("already in progress")) && ctx.Err() == nil:
			// The container's own --rm is removing it (its init ended
			// when the CLI died): wait until it is gone.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		return fmt.Errorf("docker rm -f %s: %w: %s", ContainerName(id), err, strings.TrimSpace(string(out)))
	}
}

// Probe is a cached availability check of the daemon the docker CLI
// reaches (`docker version`: the CLI's own contexts and ssh:// hosts are
// the ones `docker run` will use), or, through the backend's Available
// where its commands bypass the CLI, of the daemon the Engine API client
// reaches (the same one then, see RunsHere). A success is trusted for TTL; a failure
// is never cached, and Invalidate drops a cached success. A failure is
// explained by engine.Unreachable (a socket this user may not use names the group
// to join).
type Probe struct {
	Binary  string        // docker CLI; empty means "docker"
	TTL     time.Duration // zero means DefaultProbeTTL
	Timeout time.Duration // zero means DefaultProbeTimeout
	// Runtime, if set, must be one of the runtimes the daemon lists for
	// the probe to succeed (ErrNoRuntime).
	Runtime string
	// CacheDir, if set, persists a success across processes (one file per
	// DOCKER_HOST/DOCKER_CONTEXT and Runtime), so back-to-back `vak run`s
	// skip the probe.
	// The directory must be private to the user (vak's state dir).
	CacheDir string

	mu      sync.Mutex
	okUntil time.Time
	version string
}

// ErrNoRuntime reports that the daemon does not list the runtime the
// backend was configured with (sandbox.runtime, --runtime): nothing runs,
// rather than run under the daemon's default runtime.
var ErrNoRuntime = errors.New("the Docker Engine lists no such runtime")

// ErrRuntimeNetwork reports a proxied network asked of containers under a
// runtime other than runc: the network is fenced by nftables rules in the
// namespace the container joins, and a runtime with a network stack of
// its own (gVisor's netstack) neither reaches the netclient's loopback
// nor sends through those rules, so vak does not start it.
var ErrRuntimeNetwork = errors.New("a proxied network needs the default runtime (runc)")

// runtime is the runtime the containers name: Runtime, or
// engine.DefaultRuntime.
func (b *Backend) runtime() string { return cmp.Or(b.Runtime, engine.DefaultRuntime) }

// CheckNetwork returns ErrRuntimeNetwork when the backend's Runtime cannot
// carry a proxied network (nil for none, or under runc).
func (b *Backend) CheckNetwork(proxied bool) error {
	if !proxied || b.runtime() == engine.DefaultRuntime {
		return nil
	}
	return fmt.Errorf("runtime %q (sandbox.runtime / --runtime) with --network proxied: %w: its fence is nftables rules in the namespace the container joins, which a runtime with a network stack of its own (gVisor's) does not send through; use --network none with this runtime", b.Runtime, ErrRuntimeNetwork)
}

// Check returns nil if the daemon answered within the TTL, probing with
// `docker version` (and, with a Runtime, `docker info`) if needed.
func (p *Probe) Check(ctx context.Context) error { return p.check(ctx, nil) }

// engineAPI asks the daemon through the Engine API instead of the CLI.
type engineAPI struct {
	version  func(context.Context) (string, error)
	runtimes func(context.Context) ([]string, error)
}

// check is Check, probing with api instead of the CLI if it is set.
func (p *Probe) check(ctx context.Context, api *engineAPI) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.okUntil) {
		return nil
	}
	ttl := p.TTL
	if ttl == 0 {
		ttl = DefaultProbeTTL
	}
	cache := p.cacheFile()
	if cache != "" {
		if data, err := os.ReadFile(cache); err == nil {
			if fi, err := os.Stat(cache); err == nil && time.Since(fi.ModTime()) < ttl && time.Since(fi.ModTime()) >= 0 {
				p.okUntil, p.version = fi.ModTime().Add(ttl), strings.TrimSpace(string(data))
				return nil
			}
		}
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = DefaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if api != nil {
		v, err := api.version(ctx)
		if err == nil && v == "" {
			err = errors.New("the daemon reported no version")
		}
		if err != nil {
			if cache != "" {
				os.Remove(cache)
			}
			if errors.Is(err, engine.ErrDaemonUnavailable) {
				return err
			}
			return engine.Unreachable(engine.EnvHost(), err)
		}
		if err := p.checkRuntime(ctx, api.runtimes, cache); err != nil {
			return err
		}
		p.succeeded(v, ttl, cache)
		return nil
	}
	bin := p.Binary
	if bin == "" {
		bin = "docker"
	}
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("%w: docker CLI %q not found: %w", engine.ErrDaemonUnavailable, bin, err)
	}
	var stdout, stderr bytes.Buffer
	// `docker version`, not `docker info`: without a daemon it reports the
	// connection's own error on every CLI (Debian's 20.10 `docker info
	// --format` reports a template error instead), and it costs the daemon
	// less.
	cmd := exec.CommandContext(ctx, bin, "version", "--format", "{{.Server.Version}}")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	v := strings.TrimSpace(stdout.String())
	if err != nil || v == "" || strings.Contains(v, "<no value>") {
		msg := firstLine(stderr.String())
		if msg == "" && err != nil {
			msg = err.Error()
		}
		if msg == "" {
			msg = "docker version returned no server version"
		}
		if host := os.Getenv("DOCKER_HOST"); host != "" {
			msg += " (DOCKER_HOST=" + host + ")"
		}
		if cache != "" {
			os.Remove(cache)
		}
		return engine.Unreachable(cliHost(), errors.New(msg))
	}
	if err := p.checkRuntime(ctx, func(ctx context.Context) ([]string, error) { return cliRuntimes(ctx, bin) }, cache); err != nil {
		return err
	}
	p.succeeded(v, ttl, cache)
	return nil
}

// checkRuntime is nil without a Runtime or when list names it; else it
// forgets the cached success and returns ErrNoRuntime (or list's error).
func (p *Probe) checkRuntime(ctx context.Context, list func(context.Context) ([]string, error), cache string) error {
	if p.Runtime == "" {
		return nil
	}
	names, err := list(ctx)
	if err == nil && !slices.Contains(names, p.Runtime) {
		slices.Sort(names)
		err = fmt.Errorf("%w: %q (it lists %s); register it in the daemon's configuration (\"runtimes\" in /etc/docker/daemon.json, then reload dockerd), or change sandbox.runtime / --runtime", ErrNoRuntime, p.Runtime, strings.Join(names, ", "))
	} else if err != nil {
		err = engine.Unreachable(cliHost(), fmt.Errorf("docker info: %w", err))
	}
	if err != nil && cache != "" {
		os.Remove(cache)
	}
	return err
}

// cliRuntimes are the runtimes `docker info` lists.
func cliRuntimes(ctx context.Context, bin string) ([]string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "info", "--format", "{{json .Runtimes}}")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := firstLine(stderr.String()); msg != "" {
			return nil, errors.New(msg)
		}
		return nil, err
	}
	var rts map[string]json.RawMessage
	if err := json.Unmarshal(stdout.Bytes(), &rts); err != nil {
		return nil, fmt.Errorf("docker info listed runtimes as %q: %w", firstLine(stdout.String()), err)
	}
	names := make([]string, 0, len(rts))
	for n := range rts {
		names = append(names, n)
	}
	return names, nil
}

// succeeded records a probe's success (version v) for ttl, in cache too.
func (p *Probe) succeeded(v string, ttl time.Duration, cache string) {
	p.okUntil, p.version = time.Now().Add(ttl), v
	if cache != "" {
		// Best effort: a cache that cannot be written only costs a probe.
		tmp := cache + ".tmp"
		if os.WriteFile(tmp, []byte(v+"\n"), 0o600) == nil {
			os.Rename(tmp, cache)
		}
	}
}

// cliHost is the daemon address the docker CLI uses, when the
// environment tells it: DOCKER_HOST, else the default socket unless
// DOCKER_CONTEXT names a context ("": unknown).
func cliHost() string {
	if os.Getenv("DOCKER_HOST") == "" && os.Getenv("DOCKER_CONTEXT") != "" {
		return ""
	}
	return engine.EnvHost()
}

// cacheFile names the persisted probe result for the current daemon address.
func (p *Probe) cacheFile() string {
	if p.CacheDir == "" {
		return ""
	}
	h := sha256.Sum256([]byte(p.Binary + "\x00" + os.Getenv("DOCKER_HOST") + "\x00" + os.Getenv("DOCKER_CONTEXT") + "\x00" + p.Runtime))
	return filepath.Join(p.CacheDir, "docker-probe-"+hex.EncodeToString(h[:8]))
}

// Version is the server version seen by the last successful probe.
func (p *Probe) Version() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// Invalidate drops a cached success, in memory and on disk.
func (p *Probe) Invalidate() {
	p.mu.Lock()
	p.okUntil = time.Time{}
	if f := p.cacheFile(); f != "" {
		os.Remove(f)
	}
	p.mu.Unlock()
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
