package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// Defaults of the tools (Options fields that are zero).
const (
	// DefaultTimeout is a bash call's timeout when the call names none.
	DefaultTimeout = 2 * time.Minute
	// DefaultOutputBytes bounds each of a bash call's stdout and stderr:
	// what a model can use, not what a build can print.
	DefaultOutputBytes = 64 << 10
	// DefaultReadBytes is read_file's limit when the call names none.
	DefaultReadBytes = 256 << 10
)

// Options configure a server.
type Options struct {
	// Workspace is the canonical workspace (named in descriptions and logs).
	Workspace string
	// Mode is the sandbox mode: in read-only mode write_file and edit_file
	// are not listed.
	Mode sandbox.Mode
	// Start starts a sandbox worker (BrokerWorker); it is called for the
	// first tool call and again after a worker exited.
	Start StartFunc
	// DefaultTimeout applies to bash calls that name no timeout; MaxTimeout,
	// if set (the config's sandbox.timeout), caps every call.
	DefaultTimeout, MaxTimeout time.Duration
	// OutputBytes bounds each of stdout and stderr of a bash call.
	OutputBytes int64
	// Session, if set, names the task-environment session bash runs in
	// (told to the model: what a call installs, later calls find).
	Session string
	// AskSocket, if set, is the admin socket of the gateway of the
	// server's proxied sandbox, when it asks before refusing ([network]
	// ask): during a bash call its asks are put to the client as
	// elicitations (asks.go).
	AskSocket string
	// Version is reported to clients.
	Version string
	// Log receives the server's diagnostics (stderr: stdout is the protocol).
	Log *slog.Logger
}

// Server is vak's MCP server for one workspace.
type Server struct {
	opts  Options
	pool  *pool
	srv   *sdk.Server
	tools []string
	// sdkLog passes on the SDK's warnings (it logs every session at info).
	sdkLog *slog.Logger
	// an is the agent network registration (nil without one; agentnet.go).
	an *agentNet
	// toolsMu guards tools (agent_network comes and goes).
	toolsMu sync.Mutex
	// calls are the bash calls waiting for their client's answers to asks
	// (asks.go), by request state.
	callsMu sync.Mutex
	calls   map[string]*askingCall
}

// tool is one entry of the tool table: enabled decides per server whether
// it is listed at all (a tool that cannot work is not offered).
type tool struct {
	name    string
	enabled func(*Options) bool
	add     func(*Server)
}

func always(*Options) bool { return true }

func writable(o *Options) bool { return o.Mode != sandbox.ReadOnly }

// toolTable lists every tool vak can serve, in the order they are listed.
// A conditional tool is one more entry with its own enabled func.
func toolTable() []tool {
	return []tool{
		{"bash", always, (*Server).addBash},
		{"read_file", always, (*Server).addRead},
		{"write_file", writable, (*Server).addWrite},
		{"edit_file", writable, (*Server).addEdit},
		{"glob", always, (*Server).addGlob},
		{"grep", always, (*Server).addGrep},
	}
}

// New builds the server; no worker starts until the first tool call.
func New(o Options) (*Server, error) {
	if o.Start == nil {
		return nil, errors.New("mcp: no worker start function")
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = DefaultTimeout
	}
	if o.MaxTimeout > 0 && o.DefaultTimeout > o.MaxTimeout {
		o.DefaultTimeout = o.MaxTimeout
	}
	if o.OutputBytes <= 0 {
		o.OutputBytes = DefaultOutputBytes
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	s := &Server{opts: o, pool: &pool{start: o.Start}, sdkLog: slog.New(warnOnly{o.Log.Handler()})}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "vak", Title: "vak sandbox", Version: o.Version}, &sdk.ServerOptions{
		Instructions: "Tools of the vak sandbox for the workspace " + o.Workspace + ". bash runs commands inside the sandbox; the file tools read and change files of the workspace only. Paths are relative to the workspace root (absolute paths must lie inside it).",
		Logger:       s.sdkLog,
	})
	for _, t := range toolTable() {
		if t.enabled(&s.opts) {
			t.add(s)
			s.tools = append(s.tools, t.name)
		}
	}
	return s, nil
}

// Tools names the tools this server lists.
func (s *Server) Tools() []string {
	s.toolsMu.Lock()
	defer s.toolsMu.Unlock()
	return append([]string(nil), s.tools...)
}

// MCP is the SDK server (for transports).
func (s *Server) MCP() *sdk.Server { return s.srv }

// ServeStdio serves one client on in and out (the process's stdin and
// stdout) until the client closes in or ctx ends.
//
// A line that is not JSON gets a JSON-RPC parse error (-32700) and the
// session goes on; the SDK alone would end it.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	go s.filterLines(in, pw, w)
	err := s.srv.Run(ctx, &sdk.IOTransport{Reader: pr, Writer: w, MaxLineLength: wire.MaxRequestBytes + 1})
	pr.Close()
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}

var parseError = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not a JSON-RPC message"}}` + "\n")

// filterLines passes JSON lines from in to the SDK (pw) and answers the
// others itself. A line over wire.MaxRequestBytes, the worker protocol's
// request limit (a write_file call carries a whole file), is answered
// under its id, if it has one, with the worker's request_too_large error.
func (s *Server) filterLines(in io.Reader, pw *io.PipeWriter, out io.Writer) {
	lr := wire.NewLineReader(in, wire.MaxRequestBytes)
	for {
		line, err := lr.Next()
		switch {
		case line.TooLong:
			s.opts.Log.Warn("refused a stdio line over the request limit", "bytes", line.Size, "limit", wire.MaxRequestBytes, "id", string(line.ID))
			out.Write(tooLargeError(line))
		case len(bytes.TrimSpace(line.Data)) == 0:
		case !json.Valid(line.Data):
			s.opts.Log.Warn("answered a stdio line that is not JSON with a parse error", "bytes", line.Size)
			out.Write(parseError)
		default:
			if _, werr := pw.Write(append(line.Data, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
			pw.CloseWithError(err)
			return
		}
	}
}

// tooLargeError is the JSON-RPC error line (invalid request, -32600) for
// a line over the request limit: under the line's id (null without one),
// its message is the worker's request_too_large error, naming the size,
// the limit and what to do.
func tooLargeError(line wire.Line) []byte {
	id := line.ID
	if id == nil {
		id = json.RawMessage("null")
	}
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	data, _ := wire.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}{"2.0", id, rpcError{-32600, wire.TooLarge(line.Size).Error()}})
	return append(data, '\n')
}

// lockedWriter serializes the SDK's messages and filterLines' answers (each
// is one Write of a whole line).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }

// Warm starts the worker now instead of at the first tool call, so that a
// sandbox that cannot start fails the server at start.
func (s *Server) Warm(ctx context.Context) error {
	_, err := s.pool.get(ctx)
	return err
}

// Close ends the worker (and every process of the sandbox).
func (s *Server) Close() error {
	s.closeAgentNet()
	return s.pool.close()
}

// worker returns a running worker for a call.
func (s *Server) worker(ctx context.Context) (Worker, error) {
	return s.pool.get(ctx)
}

// toolError turns a worker or protocol error into the message a model
// reads: what was refused and why, with the error code for programs.
func (s *Server) toolError(tool string, err error) error {
	var we *wire.Error
	switch {
	case errors.As(err, &we):
		hint := codeHints[we.Code]
		if hint != "" {
			hint = " (" + hint + ")"
		}
		return fmt.Errorf("%s refused [%s]: %s%s", tool, we.Code, we.Message, hint)
	case errors.Is(err, wire.ErrWorkerExited):
		s.opts.Log.Warn("sandbox worker exited during a call; it is restarted for the next one", "tool", tool, "err", err)
		return fmt.Errorf("%s failed: the sandbox worker exited during the call (it is restarted for the next call): %w", tool, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s canceled: %w", tool, err)
	}
	s.opts.Log.Error("tool call failed", "tool", tool, "err", err)
	return fmt.Errorf("%s failed: %w", tool, err)
}

var codeHints = map[string]string{
	wire.CodeOutside:      "only paths inside the workspace are reachable",
	wire.CodeProtected:    "protected paths such as .git/hooks and vak's own config are read-only to the agent",
	wire.CodeReadOnly:     "the sandbox is in read-only mode",
	wire.CodeSymlink:      "writes do not follow symbolic links",
	wire.CodeHardLink:     "writes refuse files that have other names",
	wire.CodeNoMatch:      "old_string must occur in the file exactly as given, including whitespace",
	wire.CodeAmbiguous:    "give more surrounding context so old_string occurs once, or set replace_all",
	wire.CodeNotFound:     "no such file",
	wire.CodeInvalidRegex: "the pattern does not compile",
}

func boolp(b bool) *bool { return &b }

func annotations(title string, readOnly, destructive bool) *sdk.ToolAnnotations {
	a := &sdk.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, OpenWorldHint: boolp(false)}
	if !readOnly {
		a.DestructiveHint = boolp(destructive)
	}
	return a
}

// BashInput are the bash tool's arguments.
type BashInput struct {
	Command string  `json:"command" jsonschema:"the shell command line, run with sh -c in the sandbox (bash syntax is not guaranteed; use bash -c for it)"`
	Timeout int64   `json:"timeout,omitempty" jsonschema:"seconds after which the command's whole process tree is killed (default 120)"`
	Stdin   *string `json:"stdin,omitempty" jsonschema:"text written to the command's standard input (otherwise it reads an empty stream)"`
	Cwd     string  `json:"cwd,omitempty" jsonschema:"working directory relative to the workspace root (default: the root)"`
}

// BashOutput is the bash tool's result.
type BashOutput struct {
	ExitCode int    `json:"exit_code" jsonschema:"the command's exit status (128+N if killed by signal N)"`
	Signal   string `json:"signal,omitempty" jsonschema:"the signal that killed the shell, if any"`
	TimedOut bool   `json:"timed_out" jsonschema:"the timeout expired and the process tree was killed"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// Truncated is true when either stream was cut at the output limit.
	Truncated        bool     `json:"truncated" jsonschema:"stdout or stderr was cut at the output limit (the rest was discarded)"`
	StdoutTruncated  bool     `json:"stdout_truncated"`
	StderrTruncated  bool     `json:"stderr_truncated"`
	DurationMS       int64    `json:"duration_ms"`
	ProtectedRemoved []string `json:"protected_removed,omitempty" jsonschema:"protected paths the command created, which vak removed"`
}

func (s *Server) addBash() {
	where := ""
	if s.opts.Session != "" {
		where = "\n\nCommands run in the task-environment container " + s.opts.Session + ": what one call installs or leaves outside the workspace (packages, files in /tmp) is there for the next call."
	}
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "bash",
		Annotations: annotations("Run a command in the sandbox", false, true),
		Description: `Run a shell command inside vak's sandbox, with the workspace (` + s.opts.Workspace + `) as working directory.

` + s.confinement() + `

Each call is a fresh shell: cd and variables do not carry over, files in the workspace do. The command is killed with its whole process tree after "timeout" seconds. stdout and stderr are returned separately, each cut at ` + fmt.Sprint(s.opts.OutputBytes>>10) + ` KiB ("truncated" says so); a non-zero exit status is a normal result, not an error.` + where,
	}, s.bash)
}

// confinement tells the model what a command may do in this server's mode.
func (s *Server) confinement() string {
	switch s.opts.Mode {
	case sandbox.FullAccess:
		return "The sandbox is disabled (mode full-access): the command runs with the user's full access to files and network."
	case sandbox.ReadOnly:
		return "The command can read the system and the workspace but write nothing except a private /tmp (read-only mode); the user's home directory, credentials and other projects are not visible, and the network is reachable only as the sandbox's network policy allows."
	}
	return "The command can read the system and the workspace and write only the workspace (and a private /tmp); the user's home directory, credentials and other projects are not visible, and the network is reachable only as the sandbox's network policy allows. Protected paths (such as .git/hooks, .git/config and vak's config) are read-only, and a protected path the command creates is removed afterwards."
}

func (s *Server) bash(ctx context.Context, req *sdk.CallToolRequest, in BashInput) (*sdk.CallToolResult, BashOutput, error) {
	var ss *sdk.ServerSession
	if req != nil {
		ss = req.Session
		if req.Params != nil && req.Params.RequestState != "" {
			// The client answered the asks of a call that is still running.
			return s.resumeBash(ctx, ss, req.Params.RequestState, req.Params.InputResponses)
		}
	}
	var out BashOutput
	if strings.TrimSpace(in.Command) == "" {
		return nil, out, errors.New("bash: command is empty")
	}
	if in.Timeout < 0 {
		return nil, out, fmt.Errorf("bash: timeout %d is negative", in.Timeout)
	}
	timeout := s.opts.DefaultTimeout
	if in.Timeout > 0 {
		timeout = time.Duration(min(in.Timeout, int64(365*24*time.Hour/time.Second))) * time.Second
	}
	if s.opts.MaxTimeout > 0 && timeout > s.opts.MaxTimeout {
		timeout = s.opts.MaxTimeout
	}
	w, err := s.worker(ctx)
	if err != nil {
		return nil, out, s.toolError("bash", err)
	}
	args := wire.BashArgs{
		Command:        in.Command,
		Cwd:            in.Cwd,
		Stdin:          in.Stdin,
		TimeoutMS:      timeout.Milliseconds(),
		MaxOutputBytes: s.opts.OutputBytes,
	}
	if s.opts.AskSocket != "" && canElicit(ss) {
		// Its asks go to the client while it runs (asks.go).
		return s.startAskingBash(ctx, ss, w, args, timeout)
	}
	return s.bashResult(w.Bash(ctx, args))(timeout)
}

// bashResult is the tool's answer to a finished bash call, given its
// timeout (for the message of a call that ran out of it).
func (s *Server) bashResult(res *wire.BashResult, err error) func(time.Duration) (*sdk.CallToolResult, BashOutput, error) {
	return func(timeout time.Duration) (*sdk.CallToolResult, BashOutput, error) {
		var out BashOutput
		if err != nil {
			return nil, out, s.toolError("bash", err)
		}
		out = BashOutput{
			ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
			Stdout: res.Stdout, Stderr: res.Stderr,
			Truncated:       res.StdoutTruncated || res.StderrTruncated,
			StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
			DurationMS: res.DurationMS, ProtectedRemoved: res.ProtectedRemoved,
		}
		if res.TimedOut {
			// A tool error the model reads, with the output so far.
			msg := fmt.Sprintf("bash: the command timed out after %v and its whole process tree was killed\nstdout:\n%s\nstderr:\n%s", timeout, res.Stdout, res.Stderr)
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}, out, nil
		}
		return nil, out, nil
	}
}

// ReadInput are read_file's arguments.
type ReadInput struct {
	Path   string `json:"path" jsonschema:"file path relative to the workspace root (or absolute inside it)"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start reading at (default 0)"`
	Limit  int64  `json:"limit,omitempty" jsonschema:"most bytes to return (default 262144)"`
}

// ReadOutput is read_file's result: the JSON object of its one text block
// (read_file has no structured content).
type ReadOutput struct {
	Content   string `json:"content" jsonschema:"the bytes read: text as is, or base64 when encoding is base64"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"base64 when the bytes are not valid UTF-8 or are text full of control characters"`
	Size      int64  `json:"size" jsonschema:"the file's total size in bytes"`
	Truncated bool   `json:"truncated" jsonschema:"more bytes follow; read again with a larger offset"`
}

// addRead adds read_file. Its result is one text block holding the JSON
// object ReadOutput, and no structured content: a file's bytes (up to the
// read cap, 10 MiB) are sent once, not also as structured content, which
// the SDK would add for a tool with an output schema.
func (s *Server) addRead() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "read_file",
		Annotations: annotations("Read a workspace file", true, false),
		Description: "Read a file of the workspace (" + s.opts.Workspace + "). Paths outside the workspace, including through '..' or symbolic links that lead out of it, are refused. Returns up to limit bytes from offset as a JSON object: content (text as is, other files and text full of control characters as base64, with encoding \"base64\"), size (the file's) and truncated.",
	}, func(ctx context.Context, _ *sdk.CallToolRequest, in ReadInput) (*sdk.CallToolResult, any, error) {
		if in.Offset < 0 || in.Limit < 0 {
			return nil, nil, errors.New("read_file: offset and limit must not be negative")
		}
		if in.Limit == 0 {
			in.Limit = DefaultReadBytes
		}
		var r wire.ReadResult
		if err := s.call(ctx, "read_file", wire.OpRead, wire.ReadArgs{Path: in.Path, Offset: in.Offset, Limit: in.Limit}, &r); err != nil {
			return nil, nil, err
		}
		text, err := wire.Marshal(ReadOutput{Content: r.Content, Encoding: r.Encoding, Size: r.Size, Truncated: r.Truncated})
		if err != nil {
			return nil, nil, fmt.Errorf("read_file: encode the result: %w", err)
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(text)}}}, nil, nil
	})
}

// WriteInput are write_file's arguments.
type WriteInput struct {
	Path    string `json:"path" jsonschema:"file path relative to the workspace root (or absolute inside it); missing parent directories are created"`
	Content string `json:"content" jsonschema:"the complete new content of the file"`
}

// WriteOutput is write_file's result.
type WriteOutput struct {
	Bytes int64 `json:"bytes" jsonschema:"bytes written"`
}

func (s *Server) addWrite() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "write_file",
		Annotations: annotations("Write a workspace file", false, true),
		Description: "Create or replace a file of the workspace (" + s.opts.Workspace + ") with the given content. Refused: paths outside the workspace, writes through symbolic links, and protected paths (such as .git/hooks, .git/config and vak's config), also ones that do not exist yet.",
	}, func(ctx context.Context, _ *sdk.CallToolRequest, in WriteInput) (*sdk.CallToolResult, WriteOutput, error) {
		var r wire.WriteResult
		if err := s.call(ctx, "write_file", wire.OpWrite, wire.WriteArgs{Path: in.Path, Content: in.Content}, &r); err != nil {
			return nil, WriteOutput{}, err
		}
		return nil, WriteOutput{Bytes: r.Bytes}, nil
	})
}

// EditInput are edit_file's arguments.
type EditInput struct {
	Path       string `json:"path" jsonschema:"file path relative to the workspace root (or absolute inside it)"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, including whitespace and indentation"`
	NewString  string `json:"new_string" jsonschema:"the replacement text"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of requiring exactly one"`
}

// EditOutput is edit_file's result.
type EditOutput struct {
	Replacements int `json:"replacements" jsonschema:"how many occurrences were replaced"`
}

func (s *Server) addEdit() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "edit_file",
		Annotations: annotations("Edit a workspace file", false, false),
		Description: "Replace an exact piece of text in a file of the workspace (" + s.opts.Workspace + "). old_string must occur exactly once (or set replace_all); zero or several matches fail without changing the file. The same paths are refused as for write_file.",
	}, func(ctx context.Context, _ *sdk.CallToolRequest, in EditInput) (*sdk.CallToolResult, EditOutput, error) {
		if in.OldString == "" {
			return nil, EditOutput{}, errors.New("edit_file: old_string is empty (use write_file to create a file)")
		}
		var r wire.EditResult
		if err := s.call(ctx, "edit_file", wire.OpEdit, wire.EditArgs{Path: in.Path, Old: in.OldString, New: in.NewString, ReplaceAll: in.ReplaceAll}, &r); err != nil {
			return nil, EditOutput{}, err
		}
		return nil, EditOutput{Replacements: r.Replacements}, nil
	})
}

// GlobInput are glob's arguments.
type GlobInput struct {
	Pattern string `json:"pattern" jsonschema:"glob pattern relative to the workspace root; ** matches any number of directories, {a,b} alternatives (e.g. **/*.go)"`
	Max     int    `json:"max,omitempty" jsonschema:"most paths to return (default 1000)"`
}

// GlobOutput is glob's result.
type GlobOutput struct {
	Paths     []string `json:"paths" jsonschema:"matching paths, relative to the workspace root"`
	Truncated bool     `json:"truncated" jsonschema:"more paths matched than max"`
}

func (s *Server) addGlob() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "glob",
		Annotations: annotations("Find workspace files", true, false),
		Description: "List the files of the workspace (" + s.opts.Workspace + ") whose paths match a glob pattern. Symbolic links are not followed out of the workspace.",
	}, func(ctx context.Context, _ *sdk.CallToolRequest, in GlobInput) (*sdk.CallToolResult, GlobOutput, error) {
		if in.Max < 0 {
			return nil, GlobOutput{}, errors.New("glob: max must not be negative")
		}
		var r wire.GlobResult
		if err := s.call(ctx, "glob", wire.OpGlob, wire.GlobArgs{Pattern: in.Pattern, Max: in.Max}, &r); err != nil {
			return nil, GlobOutput{}, err
		}
		if r.Paths == nil {
			r.Paths = []string{}
		}
		return nil, GlobOutput{Paths: r.Paths, Truncated: r.Truncated}, nil
	})
}

// GrepInput are grep's arguments.
type GrepInput struct {
	Pattern string `json:"pattern" jsonschema:"RE2 regular expression matched against each line"`
	Path    string `json:"path,omitempty" jsonschema:"file or directory to search, relative to the workspace root (default: the whole workspace)"`
	Glob    string `json:"glob,omitempty" jsonschema:"only search files whose paths match this glob (e.g. **/*.go)"`
	Max     int    `json:"max,omitempty" jsonschema:"most matches to return (default 1000)"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepOutput is grep's result.
type GrepOutput struct {
	Matches   []GrepMatch `json:"matches"`
	Truncated bool        `json:"truncated" jsonschema:"more lines matched than max"`
}

func (s *Server) addGrep() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "grep",
		Annotations: annotations("Search workspace files", true, false),
		Description: "Search the files of the workspace (" + s.opts.Workspace + ") for lines matching a regular expression (RE2 syntax). Returns path, line number and line text of each match.",
	}, func(ctx context.Context, _ *sdk.CallToolRequest, in GrepInput) (*sdk.CallToolResult, GrepOutput, error) {
		if in.Max < 0 {
			return nil, GrepOutput{}, errors.New("grep: max must not be negative")
		}
		var r wire.GrepResult
		if err := s.call(ctx, "grep", wire.OpGrep, wire.GrepArgs{Pattern: in.Pattern, Path: in.Path, Glob: in.Glob, Max: in.Max}, &r); err != nil {
			return nil, GrepOutput{}, err
		}
		out := GrepOutput{Matches: []GrepMatch{}, Truncated: r.Truncated}
		for _, m := range r.Matches {
			out.Matches = append(out.Matches, GrepMatch(m))
		}
		return nil, out, nil
	})
}

// call runs one file-tool request on the worker.
func (s *Server) call(ctx context.Context, tool, op string, args, result any) error {
	w, err := s.worker(ctx)
	if err != nil {
		return s.toolError(tool, err)
	}
	if err := w.Call(ctx, op, args, result); err != nil {
		return s.toolError(tool, err)
	}
	return nil
}

// warnOnly passes on records of level warning and above.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnOnly) WithAttrs(a []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(a)} }
func (w warnOnly) WithGroup(n string) slog.Handler      { return warnOnly{w.Handler.WithGroup(n)} }
