// Package wire is the worker protocol's wire types and its client: the
// JSON-lines messages a broker exchanges with a vak worker, their limits and
// error codes, and Client, which starts a worker process and speaks to it.
// The protocol is one of vak's integration surfaces (docs/worker-protocol.md):
// a program outside this module speaks it from that description. The package
// depends on nothing else in vak, so that it could be published as that
// program's client without the sandbox backends.
//
// One request per line, one final response per request (matched by id),
// requests may be pipelined and are served concurrently:
//
//	-> {"id":"1","op":"bash","args":{"command":"make test","timeout_ms":60000}}
//	<- {"id":"1","ok":true,"result":{"exit_code":0,"stdout":"...","stderr":""}}
//
// A malformed, unknown or oversized request gets an error response and the
// worker keeps serving. The full protocol is documented in
// docs/worker-protocol.md.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ProtocolVersion is sent in the ready event; bump on incompatible changes.
const ProtocolVersion = 1

// Limits of the protocol.
const (
	// MaxRequestBytes bounds one request line (a write carries file content).
	MaxRequestBytes = 16 << 20
	// DefaultOutputBytes bounds each of stdout and stderr of a bash result.
	DefaultOutputBytes = 1 << 20
	// MaxOutputBytes is the most a request may ask for per stream.
	MaxOutputBytes = 64 << 20
	// MaxConcurrent requests are served at once; more wait.
	MaxConcurrent = 16
)

// Operations.
const (
	OpBash   = "bash"
	OpRead   = "read"
	OpWrite  = "write"
	OpEdit   = "edit"
	OpGlob   = "glob"
	OpGrep   = "grep"
	OpCancel = "cancel"
	OpPing   = "ping"
	OpInput  = "input"
	OpResize = "resize"
	// OpSignal delivers a signal to an interactive command (SignalArgs).
	OpSignal = "signal"
	// OpTools lists the tools the worker serves (ToolsResult).
	OpTools = "tools"
)

// ToolAgentNetwork is the brokered workspace network's tool. No worker
// serves it: the trusted side does (broker.Session.CallTool), and lists it
// next to the worker's tools (broker.Session.Tools) only while the
// workspace has a live edge. Its arguments and result are
// AgentNetworkArgs and AgentNetworkResult.
const ToolAgentNetwork = "agent_network"

// ToolsResult lists the tools a worker serves, in a stable order.
type ToolsResult struct {
	Tools []string `json:"tools"`
}

// AgentNetworkArgs are agent_network's arguments (docs/agent-network.md).
type AgentNetworkArgs struct {
	// Op is peers, send, receive, request or reply.
	Op          string `json:"op"`
	Peer        string `json:"peer,omitempty"`
	Topic       string `json:"topic,omitempty"`
	Message     string `json:"message,omitempty"`
	Correlation string `json:"correlation,omitempty"`
	WaitSeconds int    `json:"wait_seconds,omitempty"`
}

// AgentNetworkPeer is one reachable workspace.
type AgentNetworkPeer struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
}

// AgentNetworkMessage is a received message.
type AgentNetworkMessage struct {
	ID          string `json:"id"`
	From        string `json:"from"`
	Topic       string `json:"topic"`
	Kind        string `json:"kind"`
	Correlation string `json:"correlation,omitempty"`
	Message     string `json:"message"`
}

// AgentNetworkResult is agent_network's result.
type AgentNetworkResult struct {
	Peers       []AgentNetworkPeer   `json:"peers,omitempty"`
	ID          string               `json:"id,omitempty"`
	Correlation string               `json:"correlation,omitempty"`
	Message     *AgentNetworkMessage `json:"message,omitempty"`
	TimedOut    bool                 `json:"timed_out,omitempty"`
}

// Request is one line from the broker.
type Request struct {
	ID   string          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// BashArgs runs a shell command line with sh -c.
type BashArgs struct {
	Command string `json:"command"`
	// Cwd is the working directory, absolute inside the workspace or
	// relative to it; empty means the workspace root.
	Cwd string `json:"cwd,omitempty"`
	// Env adds variables; names must match [A-Za-z_][A-Za-z0-9_]* and not be
	// one of the variables the worker controls (see docs).
	Env map[string]string `json:"env,omitempty"`
	// TimeoutMS kills the command's whole process tree after this long; 0
	// means the worker's default (none unless configured).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// MaxOutputBytes bounds stdout and stderr each; 0 means DefaultOutputBytes.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// Stream sends output as "output" events while the command runs; the
	// final result then carries no stdout/stderr.
	Stream bool `json:"stream,omitempty"`
	// Stdin, if set, is written to the command's standard input (otherwise
	// it reads /dev/null).
	Stdin *string `json:"stdin,omitempty"`
	// Interactive streams the command's standard input with input requests
	// that name this request (Stdin must be unset).
	Interactive bool `json:"interactive,omitempty"`
	// TTY, if set, runs the command on a new pseudo-terminal of this size
	// that the worker allocates (inside the sandbox): its stdin, stdout and
	// stderr are the terminal, output arrives as stdout only, and it implies
	// Interactive. Resize requests change the size.
	TTY *TTYSize `json:"tty,omitempty"`
}

// TTYSize is a terminal's size in character cells.
type TTYSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// InputArgs feeds stdin of the interactive bash request Target. Data is
// base64 in JSON (exact bytes); EOF closes the command's stdin after Data
// (on a terminal it sends the terminal's end-of-file character instead).
// The response comes once the command has taken Data (send the next input
// after it: that is the flow control), or with an error once the command
// ended.
type InputArgs struct {
	Target string `json:"target"`
	Data   []byte `json:"data,omitempty"`
	EOF    bool   `json:"eof,omitempty"`
}

// ResizeArgs changes the terminal size of the TTY bash request Target (the
// command's foreground process group gets SIGWINCH).
type ResizeArgs struct {
	Target string `json:"target"`
	TTYSize
}

// SignalArgs delivers signal Signal to the interactive bash request Target:
// to its command's process group (the command leads its own session), or,
// for a command-scoped backend's wrapper, to the wrapper, which forwards it
// to the command inside the sandbox. Signal is a name from Signals without
// the SIG prefix.
type SignalArgs struct {
	Target string `json:"target"`
	Signal string `json:"signal"`
}

// Signals are the signals a client may deliver to an interactive command,
// by name: the ones a user's terminal or shell sends to a foreground job
// (interrupt, quit, hangup, terminate, the user signals and a window
// change). Anything else (KILL, STOP, CONT, ...) is refused: stopping and
// killing the command are the worker's (cancel, timeouts).
var Signals = []string{"INT", "TERM", "HUP", "QUIT", "USR1", "USR2", "WINCH"}

// CheckSignal returns nil when name is one of Signals, else a protocol
// error naming it.
func CheckSignal(name string) *Error {
	for _, s := range Signals {
		if s == name {
			return nil
		}
	}
	return Errorf(CodeProtocol, "signal %q is not one of %v", name, Signals)
}

// BashResult is the result of a bash request.
type BashResult struct {
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the shell, if any.
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	Canceled        bool   `json:"canceled,omitempty"`
	Stdout          string `json:"stdout,omitempty"`
	Stderr          string `json:"stderr,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
	// ProtectedRemoved lists protected paths the command created, which the
	// worker removed (they would run outside the sandbox later).
	ProtectedRemoved []string `json:"protected_removed,omitempty"`
	// SetuidCleared lists workspace files whose setuid or setgid bit the
	// worker cleared after the command, with the mode they had.
	SetuidCleared []string `json:"setuid_cleared,omitempty"`
	// TripwireWarnings are checks after the command that could not be
	// completed (a planted path that could not be removed, a workspace too
	// large to walk entirely).
	TripwireWarnings []string `json:"tripwire_warnings,omitempty"`
}

// ReadArgs reads a file.
type ReadArgs struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Limit  int64  `json:"limit,omitempty"`
}

// Content encodings.
const (
	EncodingUTF8   = ""       // content is the text itself (the default)
	EncodingBase64 = "base64" // content is standard base64 of the bytes
)

// ReadResult carries file content: text as is, anything that is not valid
// UTF-8 as base64 (Encoding says which).
type ReadResult struct {
	Content   string `json:"content"`
	Encoding  string `json:"encoding,omitempty"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated,omitempty"`
}

// WriteArgs creates or replaces a file.
type WriteArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	// Encoding "base64" writes the decoded bytes (binary files).
	Encoding string `json:"encoding,omitempty"`
}

// WriteResult reports a write.
type WriteResult struct {
	Bytes int64 `json:"bytes"`
}

// EditArgs replaces text in a file.
type EditArgs struct {
	Path       string `json:"path"`
	Old        string `json:"old"`
	New        string `json:"new"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// EditResult reports an edit.
type EditResult struct {
	Replacements int `json:"replacements"`
}

// GlobArgs lists files matching a pattern (** matches any depth).
type GlobArgs struct {
	Pattern string `json:"pattern"`
	Max     int    `json:"max,omitempty"`
}

// GlobResult lists workspace-relative paths.
type GlobResult struct {
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated,omitempty"`
}

// GrepArgs searches files with an RE2 regular expression.
type GrepArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
	Glob    string `json:"glob,omitempty"`
	Max     int    `json:"max,omitempty"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepResult lists matches.
type GrepResult struct {
	Matches   []GrepMatch `json:"matches"`
	Truncated bool        `json:"truncated,omitempty"`
}

// CancelArgs cancels a running request (its process tree is killed).
type CancelArgs struct {
	Target string `json:"target"`
}

// Response is the final line for a request. Exactly one of Result and Error
// is set; OK says which.
type Response struct {
	ID     string          `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Event is an unsolicited line: "ready" once at start, "output" for
// streamed bash output (Data is base64 in JSON, exact bytes).
type Event struct {
	Event string `json:"event"`
	ID    string `json:"id,omitempty"`
	// Stream is "stdout" or "stderr" for output events.
	Stream string `json:"stream,omitempty"`
	Data   []byte `json:"data,omitempty"`
	// Ready fields.
	Version int    `json:"version,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Sandbox describes the restrictions in force (e.g. "landlock abi 7,
	// seccomp, user+mount+pid+net namespaces").
	Sandbox string `json:"sandbox,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// Started and Restricted are when the worker's process began (its Go
	// packages were initialised) and when its sandbox entry returned (the
	// restrictions in force), as Unix times in nanoseconds; vak run --trace
	// shows them. Zero when unknown.
	Started    int64 `json:"started_ns,omitempty"`
	Restricted int64 `json:"restricted_ns,omitempty"`
	// Phases are earlier parts of the worker's start that its backend
	// measured before this process began (landlock: stage 1's start-up,
	// its view, stage 2's start), in the order they happened; vak run
	// --trace shows them. Empty when unknown.
	Phases []Phase `json:"phases,omitempty"`
}

// Phase is one timed part of a worker's start (Event.Phases): Unix times
// in nanoseconds; a zero Start means when the worker was spawned.
type Phase struct {
	Name  string `json:"name"`
	Start int64  `json:"start_ns"`
	End   int64  `json:"end_ns"`
}

// Error codes. They are stable: embedders switch on them.
const (
	CodeProtocol     = "protocol_error"    // malformed line, unknown op, bad args
	CodeTooLarge     = "request_too_large" // line over MaxRequestBytes
	CodeOutside      = "outside_workspace" // path or cwd escapes the workspace
	CodeProtected    = "protected_path"    // write to a protected path
	CodeReadOnly     = "read_only"         // write in read-only mode
	CodeNotFound     = "not_found"         // no such file
	CodeIsDir        = "is_directory"      // a directory where a file was needed
	CodeNotRegular   = "not_regular"       // device, socket, fifo, ...
	CodeFileTooLarge = "file_too_large"    // beyond the read/write cap
	CodeNoMatch      = "no_match"          // edit: old text not found
	CodeAmbiguous    = "ambiguous"         // edit: old text occurs more than once
	CodeInvalidPath  = "invalid_path"      // empty, NUL, ...
	CodeSymlink      = "symlink_refused"   // a write would traverse a symlink
	CodeHardLink     = "hard_link_refused" // a write target has other names
	CodeUnsupported  = "unsupported"       // the kernel lacks what the tool needs
	CodeInvalidRegex = "invalid_pattern"   // glob or regexp does not compile
	CodeDuplicateID  = "duplicate_id"      // id already in flight
	CodeUnknownID    = "unknown_id"        // cancel of an id not in flight
	CodeExec         = "exec_failed"       // the shell could not be started
	CodeInternal     = "internal"          // a bug; the message says more
)

// Error is a typed protocol error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is lets errors.Is match on the code: errors.Is(err, &Error{Code: CodeOutside}).
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code && t.Message == ""
}

// Errorf returns an Error with code and a formatted message.
func Errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// CheckWarnings are the warnings of the worker's check after the command,
// as vak prints them: protected paths it removed, setuid bits it cleared,
// what else the check noticed.
func (r *BashResult) CheckWarnings() []string {
	var out []string
	for _, p := range r.ProtectedRemoved {
		out = append(out, "the command created or redirected protected path "+p+"; it was removed (it would run outside the sandbox)")
	}
	for _, p := range r.SetuidCleared {
		out = append(out, "the command left a setuid or setgid file "+p+"; the bits were cleared")
	}
	for _, w := range r.TripwireWarnings {
		out = append(out, "check after the command: "+w)
	}
	return out
}
