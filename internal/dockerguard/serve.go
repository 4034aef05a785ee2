package dockerguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
)

// Serve runs the guard on the unix socket p.GuardSocket (mode 0666: the
// agent may run as any uid; what it may do is the guard's business) and,
// when p.ReaperSocket is set, the reaper handler on that socket, both
// forwarding to rawSocket, until ctx ends.
func Serve(ctx context.Context, p Policy, rawSocket string, ready func()) error {
	g, err := New(p, rawSocket)
	if err != nil {
		return err
	}
	listen := func(path string) (net.Listener, error) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("dockerguard: %w", err)
		}
		os.Remove(path)
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("dockerguard: listen on %s: %w", path, err)
		}
		if err := os.Chmod(path, 0o666); err != nil {
			ln.Close()
			return nil, fmt.Errorf("dockerguard: %w", err)
		}
		return ln, nil
	}
	errc := make(chan error, 2)
	var servers []*http.Server
	start := func(path string, h http.Handler) error {
		ln, err := listen(path)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h}
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
		return nil
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	if err := start(p.GuardSocket, g); err != nil {
		return err
	}
	if p.ReaperSocket != "" {
		if err := start(p.ReaperSocket, g.Reaper()); err != nil {
			return err
		}
	}
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("dockerguard: %w", err)
	}
}

// Args is the `vak dockerguard` command line (after the vak binary's path)
// that serves p in front of rawSocket: for starting the guard inside the
// sidecar (docker exec, or a compose entrypoint).
func Args(p Policy, rawSocket string) []string {
	args := []string{"dockerguard", "--listen", p.GuardSocket, "--upstream", rawSocket,
		"--workspace", p.Workspace, "--trust-dir", p.TrustDir, "--pool", p.Pool.String(), "--dns", p.DNS.String()}
	if p.ReaperSocket != "" {
		args = append(args, "--reaper", p.ReaperSocket)
	}
	for _, k := range mapKeys(p.Labels) {
		args = append(args, "--label", k+"="+p.Labels[k])
	}
	for _, kv := range p.TrustEnv {
		args = append(args, "--trust-env", kv)
	}
	for _, kv := range p.Env {
		args = append(args, "--env", kv)
	}
	if p.StageDir != "" {
		args = append(args, "--stage-binds", p.StageDir)
	}
	return args
}
