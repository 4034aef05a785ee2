package worker

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"vak/internal/sandbox"
)

// SpecFD is the file descriptor on which a worker reads its Spec (the
// broker passes a pipe as the first extra file).
const SpecFD = 3

// MaxSpecBytes bounds the spec.
const MaxSpecBytes = 1 << 20

// Spec is everything a worker needs, decided by the broker.
type Spec struct {
	// Backend that contains this worker: landlock, seatbelt, docker or none.
	// For docker the worker is a host process and every bash command it
	// receives is already a wrapped `docker run`.
	Backend   string       `json:"backend"`
	Workspace string       `json:"workspace"`
	Mode      sandbox.Mode `json:"mode"`
	// Env is the complete environment of commands (scrubbed by the broker).
	Env []string `json:"env"`
	// Protected are workspace-relative paths that stay read-only.
	Protected []string `json:"protected"`
	// DefaultTimeout applies to bash requests that set none.
	DefaultTimeout time.Duration `json:"default_timeout"`
	// Sandbox is the backend's own data for its worker entry point
	// (sandbox.WorkerLaunch.Spec); the worker hands it over unread.
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
	// Launcher prefixes every command (see Exec.Launcher).
	Launcher []string `json:"launcher,omitempty"`
	// Lifeline, for the docker backend, is the worker's descriptor (an
	// extra file) of the read end of a pipe whose write end the broker
	// holds; every `docker run` gets it as its stdin (an interactive
	// command: on sandbox.InteractiveLifelineFD). When the broker dies,
	// however it dies, the pipe reaches EOF, the docker CLI closes the
	// container's stdin, and the container's init kills the command (see
	// docker.Wrap). Zero means none.
	Lifeline int `json:"lifeline,omitempty"`
	// Container configures a worker that is a session container's
	// entrypoint (backend BackendContainer); see RunContainer.
	Container *ContainerSpec `json:"container,omitempty"`
	// SweptAtClose says the worker runs one command and the broker then
	// checks the workspace itself, after every process of the sandbox is
	// gone, against its state before the worker started
	// (sandbox.WorkerLaunch.SweepAtClose): that sweep is the command's
	// check, and the worker makes none of its own (it would walk the
	// workspace twice more to find a subset of what the sweep finds).
	SweptAtClose bool `json:"swept_at_close,omitempty"`
	// Watched says the broker holds the workspace with a watcher of its
	// own for the whole session (a long-lived landlock session's
	// worker.Watcher, against the workspace when the session began) and
	// passes it after every command, before the command's result goes
	// on: that pass is the command's check, and the worker makes none of
	// its own (one mechanism per session, not a second walk and watch
	// inside the sandbox that finds a subset of what the watcher finds).
	Watched bool `json:"watched,omitempty"`
}

// Encode serialises the spec.
func (s *Spec) Encode() ([]byte, error) { return json.Marshal(s) }

// ReadSpec reads and validates the spec from the worker's spec descriptor.
func ReadSpec() (*Spec, []byte, error) {
	f := os.NewFile(SpecFD, "spec")
	if f == nil {
		return nil, nil, fmt.Errorf("worker: no spec on fd %d", SpecFD)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("worker: read spec: %w", err)
	}
	s, err := ParseSpec(data)
	return s, data, err
}

// ParseSpec decodes and validates a spec.
func ParseSpec(data []byte) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("worker: spec larger than %d bytes", MaxSpecBytes)
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("worker: decode spec: %w", err)
	}
	if s.Workspace == "" || !s.Mode.Restricted() && s.Mode != sandbox.FullAccess {
		return nil, fmt.Errorf("worker: spec lacks workspace or mode")
	}
	return &s, nil
}
