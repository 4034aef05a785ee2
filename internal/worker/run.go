package worker

import (
	"context"
	"fmt"
	"io"
	"os"

	"vak/internal/sandbox"
)

// Run serves the protocol for spec on in/out until in is closed. sandbox
// describes the restrictions in force (sent in the ready event).
func Run(ctx context.Context, spec *Spec, sandboxDesc string, in io.Reader, out io.Writer) error {
	files, err := OpenFiles(spec.Workspace, spec.Mode, spec.Protected)
	if err != nil {
		return err
	}
	defer files.Close()
	var lifeline *os.File
	if spec.Lifeline > 0 {
		if lifeline = os.NewFile(uintptr(spec.Lifeline), "lifeline"); lifeline == nil {
			return fmt.Errorf("worker: no lifeline on fd %d", spec.Lifeline)
		}
		defer lifeline.Close()
	}
	srv := &Server{
		Files: files,
		Shell: &Exec{
			Workspace:      spec.Workspace,
			Env:            spec.Env,
			DefaultTimeout: spec.DefaultTimeout,
			Protected:      spec.Protected,
			NoTripwire:     spec.Mode == sandbox.FullAccess,
			Launcher:       spec.Launcher,
			Lifeline:       lifeline,
		},
		Ready: Event{Backend: spec.Backend, Sandbox: sandboxDesc, PID: os.Getpid()},
	}
	return srv.Serve(ctx, in, out)
}
