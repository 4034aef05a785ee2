package worker

import (
	"context"
	"io"
	"os"
	"vak/internal/worker/wire"
)

// Run serves the protocol for spec on in/out until in is closed. sandbox
// describes the restrictions in force (sent in the ready event).
func Run(ctx context.Context, spec *Spec, sandboxDesc string, in io.Reader, out io.Writer) error {
	files, err := OpenFiles(spec.Workspace, spec.Mode, spec.Protected)
	if err != nil {
		return err
	}
	defer files.Close()
	srv := &Server{
		Files: files,
		Shell: &Exec{
			Workspace:      spec.Workspace,
			Env:            spec.Env,
			DefaultTimeout: spec.DefaultTimeout,
			Protected:      spec.Protected,
			Launcher:       spec.Launcher,
		},
		Ready: wire.Event{Backend: spec.Backend, Sandbox: sandboxDesc, PID: os.Getpid()},
	}
	return srv.Serve(ctx, in, out)
}
