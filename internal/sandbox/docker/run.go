package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/sandbox"
)

// The docker CLI's own failure, as its `docker run` reports it.
const cliFailure = 125

var _ sandbox.Runner = (*Backend)(nil)

// Runner implements sandbox.Runner: where the docker CLI would only be a
// client of the Engine API (no CLI context, no ssh:// host, no Binary
// override; see CLIReason), the command's container, the one Wrap
// describes, is created, attached, started and waited for through the
// Engine API from this process, as the CLI does for Wrap's argv. That
// saves a start of the docker CLI, a program as large as vak (about 40 ms
// of a 600 ms `vak run --backend docker -- true` on the benchmark
// machine). Elsewhere it returns nil and the broker runs Wrap's argv.
func (b *Backend) Runner(c sandbox.Command) (sandbox.RunFunc, error) {
	if !b.RunsHere() {
		return nil, nil
	}
	sp, err := b.spec(c)
	if err != nil {
		return nil, err
	}
	req, err := sp.create(sp.runArgv(c.Shell))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, lifeline *os.File, stdout, stderr io.Writer) (int, error) {
		cli, err := b.engine()
		if err != nil {
			fmt.Fprintf(stderr, "docker: %v\n", err)
			return cliFailure, nil
		}
		return runContainer(ctx, cli, req, lifeline, stdout, stderr), nil
	}, nil
}

// RunsHere reports whether this process can do what the docker CLI would
// do for a wrapped command (CLIReason is empty).
func (b *Backend) RunsHere() bool { return b.CLIReason() == "" }

// CLIReason says why commands need the docker CLI here, or "" when the CLI
// would only be a client of the daemon the Engine API client reads from
// the environment: the CLI is the one from PATH (Binary empty), DOCKER_HOST
// is not an ssh:// address (which only the CLI dials), and no context is
// chosen (DOCKER_CONTEXT, or a current context in the CLI's config file).
func (b *Backend) CLIReason() string {
	if b.Binary != "" {
		return "the docker CLI is set to " + b.Binary
	}
	if c := os.Getenv("DOCKER_CONTEXT"); c != "" {
		return "DOCKER_CONTEXT=" + c
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if strings.HasPrefix(h, "ssh://") {
			return "DOCKER_HOST is an ssh:// address"
		}
		return ""
	}
	if c := cliContext(); c != "" {
		return "the docker CLI's config.json selects context " + c
	}
	return ""
}

// cliContext is the current context named in the docker CLI's config
// file ("" for none or "default").
func cliContext() string {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".docker")
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return ""
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		// A file the CLI cannot read either: let the CLI say so.
		return "(unreadable)"
	}
	if cfg.CurrentContext == "default" {
		return ""
	}
	return cfg.CurrentContext
}

// engine is the backend's Engine API client, made once.
func (b *Backend) engine() (*engine.Client, error) {
	b.cliOnce.Do(func() { b.cli, b.cliErr = engine.New() })
	return b.cli, b.cliErr
}

// createRequest is what `docker run` sends to create a container.
type createRequest struct {
	name   string
	config *container.Config
	host   *container.HostConfig
}

// create renders sp with cmd as the Engine API request the docker CLI
// sends for sp.args followed by cmd (`docker run -i --rm ...`): stdin
// attached and closed at its first EOF, the container removed when it
// ends. The seccomp profile goes in by content, as the CLI sends it.
func (sp runSpec) create(cmd []string) (createRequest, error) {
	cfg := &container.Config{
		User:         sp.user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		StdinOnce:    true,
		Env:          lastWins(sp.env),
		Cmd:          cmd,
		Image:        sp.image,
		WorkingDir:   sp.workdir,
		Labels:       map[string]string{},
	}
	for _, l := range sp.labels {
		k, v, _ := strings.Cut(l, "=")
		cfg.Labels[k] = v
	}
	swappiness := int64(-1)
	pids := sp.pids
	host := &container.HostConfig{
		Binds:          binds(sp),
		NetworkMode:    container.NetworkMode(sp.netMode),
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		AutoRemove:     true,
		CapDrop:        []string{"ALL"},
		ReadonlyRootfs: sp.readOnly,
		SecurityOpt:    []string{"no-new-privileges"},
		Tmpfs:          map[string]string{"/tmp": sp.tmpfs},
		Runtime:        sp.runtime,
	}
	host.Memory = sp.memory
	host.NanoCPUs = int64(math.Round(sp.cpus * 1e9))
	host.MemorySwappiness = &swappiness
	host.PidsLimit = &pids
	if sp.seccompPath != "" {
		// The file's content is the profile this process built and
		// SeccompFile just checked the file against: no second read.
		var compact bytes.Buffer
		if err := json.Compact(&compact, seccompJSON.data); err != nil {
			return createRequest{}, fmt.Errorf("docker wrap: seccomp profile %s: %w", sp.seccompPath, err)
		}
		host.SecurityOpt = append(host.SecurityOpt, "seccomp="+compact.String())
	}
	return createRequest{name: sp.name, config: cfg, host: host}, nil
}

// lastWins is env with one entry per name, as the docker CLI sends -e
// flags: a name's value is its last one, at its first one's place.
func lastWins(env []string) []string {
	var out []string
	at := map[string]int{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			out[i] = kv
			continue
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// binds are sp's bind mounts in the order of its -v flags.
func binds(sp runSpec) []string {
	var b []string
	b = append(b, sp.wsBind)
	b = append(b, sp.pinBinds...)
	b = append(b, sp.roBinds...)
	b = append(b, sp.netBinds...)
	if sp.homeBind != "" {
		b = append(b, sp.homeBind)
	}
	return b
}

// runContainer creates, attaches, starts and waits for req's container, as `docker
// run -i --rm` does, and returns its exit status; a failure of its own is
// reported as the CLI reports it, on stderr with status 125 (the broker
// then asks WrapperFailed whether the daemon went away). Its stdin is the
// lifeline: at the lifeline's EOF the container's stdin closes and
// LifelineInit kills the command; if this process dies, the attach
// connection closes, which does the same. Canceling ctx closes the
// connection too, and run returns at once (the broker removes the
// container).
func runContainer(ctx context.Context, cli *engine.Client, req createRequest, lifeline *os.File, stdout, stderr io.Writer) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(stderr, "docker: %v\n", engine.APIError(what, err))
		return cliFailure
	}
	id, err := createContainer(ctx, cli, req, stderr)
	if err != nil {
		return fail("", err)
	}
	att, err := cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		removeContainer(cli, id)
		return fail("attach", err)
	}
	defer att.Close()
	wctx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	wait := cli.ContainerWait(wctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	stopLifeline, err := forwardLifeline(lifeline, &att.HijackedResponse)
	if err != nil {
		removeContainer(cli, id)
		return fail("", err)
	}
	defer stopLifeline()
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		removeContainer(cli, id)
		return fail("start", err)
	}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		copied <- err
	}()
	select {
	case <-copied:
	case <-ctx.Done():
		att.Close()
		return cliFailure
	}
	select {
	case res := <-wait.Result:
		if res.Error != nil && res.Error.Message != "" {
			fmt.Fprintf(stderr, "docker: %s\n", res.Error.Message)
			return cliFailure
		}
		return int(res.StatusCode)
	case err := <-wait.Error:
		return fail("wait", err)
	case <-ctx.Done():
		return cliFailure
	}
}

// createContainer creates req's container, pulling its image first if the
// daemon does not have it, as the CLI does ("Unable to find image").
func createContainer(ctx context.Context, cli *engine.Client, req createRequest, stderr io.Writer) (string, error) {
	opts := client.ContainerCreateOptions{Name: req.name, Config: req.config, HostConfig: req.host}
	res, err := cli.ContainerCreate(ctx, opts)
	if err == nil || !cerrdefs.IsNotFound(err) {
		return res.ID, err
	}
	fmt.Fprintf(stderr, "Unable to find image '%s' locally\n", req.config.Image)
	pull, perr := cli.ImagePull(ctx, req.config.Image, client.ImagePullOptions{})
	if perr == nil {
		perr = pull.Wait(ctx)
	}
	if perr != nil {
		return "", perr
	}
	res, err = cli.ContainerCreate(ctx, opts)
	return res.ID, err
}

// removeContainer removes a container that was created but never ran (its
// --rm applies only once it started).
func removeContainer(cli *engine.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
}

// forwardLifeline copies the lifeline into the container's stdin and
// closes that at the lifeline's EOF. It reads a duplicate of the
// lifeline's descriptor, whose read the returned stop ends (by deadline)
// without touching the lifeline itself, which later commands use too.
// Without a lifeline the container's stdin stays open until the attach
// connection closes.
func forwardLifeline(lifeline *os.File, hj *client.HijackedResponse) (stop func(), _ error) {
	if lifeline == nil {
		return func() {}, nil
	}
	rc, err := lifeline.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("lifeline: %w", err)
	}
	var dup *os.File
	cerr := rc.Control(func(fd uintptr) {
		var nfd int
		if nfd, err = syscall.Dup(int(fd)); err == nil {
			syscall.CloseOnExec(nfd)
			dup = os.NewFile(uintptr(nfd), "lifeline")
		}
	})
	if err = errors.Join(cerr, err); err != nil {
		return nil, fmt.Errorf("lifeline: %w", err)
	}
	// The lifeline is a pipe os.Pipe made non-blocking: the duplicate
	// shares that, so it is pollable and takes a read deadline.
	if err := dup.SetReadDeadline(time.Time{}); err != nil {
		dup.Close()
		return nil, fmt.Errorf("lifeline: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := io.Copy(hj.Conn, dup); err == nil {
			hj.CloseWrite()
		}
	}()
	return func() {
		dup.SetReadDeadline(time.Now())
		<-done
		dup.Close()
	}, nil
}
