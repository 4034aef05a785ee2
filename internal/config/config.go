// Package config loads vak's configuration.
//
// Two TOML files feed it. The user config ($XDG_CONFIG_HOME/vak/config.toml)
// is trusted. The project config (<workspace>/.vak/config.toml) is written by
// whoever controls the repository, possibly the agent itself, so it is
// untrusted: every privileged key in it (sandbox backend, image, user and
// limits; network, secrets, docker) is stripped with a warning naming the key,
// and the keys it may set can only narrow what the user config allows.
//
// Both files are decoded strictly into wire structs (an unknown key is an
// error naming file, line and key), then validated into the runtime Config.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"vak/internal/egress/egressconfig"
	"vak/internal/errclass"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/suggest"
)

// Version is the only config file version this build understands.
const Version = 1

// Defaults.
const (
	DefaultBackend = sandbox.Auto
	DefaultMode    = sandbox.WorkspaceWrite
	DefaultImage   = "alpine:3.20" // docker.DefaultImage; a literal so config does not import the docker package (TestDefaultsMatchBackends)
	DefaultUser    = UserHost
)

// MaxFileSize bounds a config file; anything larger is refused.
const MaxFileSize = 1 << 20

// User selects the identity inside container backends.
type User string

const (
	// UserHost maps the container user to the invoking host uid:gid.
	UserHost User = "host"
	// UserRoot runs containers as root (explicit opt-in).
	UserRoot User = "root"
)

// DefaultProtected are the workspace paths that stay read-only in every
// mode (see sandbox.DefaultProtected).
var DefaultProtected = sandbox.DefaultProtected

// ErrInvalid is wrapped by every error about a config file's content.
var ErrInvalid = errclass.New(errclass.Config, "invalid config")

// Error describes a problem in a config file. Line and Column are 1-based, 0
// when unknown.
type Error struct {
	File   string
	Line   int
	Column int
	Key    string
	Msg    string
	// Err is the cause, when there is one (e.g. fs.ErrNotExist for a
	// config file named explicitly that does not exist).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes every *Error match ErrInvalid, and Err when set.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// Source is one config file that was considered.
type Source struct {
	Path    string
	Trusted bool
	Exists  bool
}

// Sandbox is the validated [sandbox] section.
type Sandbox struct {
	Backend sandbox.Name
	Mode    sandbox.Mode
	Image   string
	// Runtime is the OCI runtime the docker backend's containers run
	// under (a name the Docker Engine lists, e.g. "runsc" for gVisor);
	// empty means the Engine's default (trusted config or --runtime only).
	Runtime string
	User    User
	Limits  sandbox.Limits
	// Timeout bounds each command; zero means no timeout.
	Timeout time.Duration
	// AllowWeaker accepts a weaker native sandbox (see [sandbox] docs).
	AllowWeaker bool
	// ReadPaths and WritePaths are extra canonical host paths for the
	// native sandbox (trusted config only).
	ReadPaths  []string
	WritePaths []string
	// Env names extra host environment variables passed into the sandbox.
	Env []string
	// Home is the sandbox's home directory (sandbox.DefaultHome unless set).
	Home sandbox.HomeChoice
	// HomeSet says a config file or a flag chose Home: a default home may
	// fall back to a fresh one where a backend cannot place it, a chosen
	// one fails instead.
	HomeSet bool
}

// Files is the validated [files] section.
type Files struct {
	// Protected are workspace-relative paths that stay read-only in every
	// mode (DefaultProtected plus configured additions).
	Protected []string
}

// Config is the effective, validated configuration.
type Config struct {
	Sandbox Sandbox
	Files   Files
	Session Session
	// Kubernetes is [kubernetes]: the cluster of the kubernetes session
	// backend (trusted only).
	Kubernetes Kubernetes
	// Network is the network policy of restricted modes: the trusted
	// config's network.policy, else none (the --network flag overrides it).
	Network sandbox.NetworkPolicy
	// Egress is the validated gateway configuration ([network], [gateway],
	// [secrets]) from the trusted user config; nil when it has none.
	Egress *egressconfig.Config
	// EgressSections are the same sections as decoded (strictly, with the
	// rest of the file), for whoever starts a gateway with them (proxynet);
	// nil when the trusted config has none. EgressFile names their file.
	EgressSections *egressconfig.Sections
	EgressFile     string
	// AgentNetwork is [agent_network] (trusted; a project may only disable).
	AgentNetwork AgentNetwork
	// Sources lists the files considered, in order of application.
	Sources []Source
	// Warnings are non-fatal findings (stripped project keys, ignored widenings).
	Warnings []string
}

// Default returns the built-in configuration.
func Default() *Config {
	return &Config{
		Sandbox: Sandbox{
			Backend: DefaultBackend,
			Mode:    DefaultMode,
			Image:   DefaultImage,
			User:    DefaultUser,
			Limits:  sandbox.DefaultLimits(),
			Home:    sandbox.DefaultHome,
		},
		Files:      Files{Protected: slices.Clone(DefaultProtected)},
		Session:    DefaultSession(),
		Kubernetes: DefaultKubernetes(),
		Network:    sandbox.NetworkNone,
	}
}

// Options say where Load looks.
type Options struct {
	// UserFile is the trusted config, named explicitly (vak --config): it
	// must exist. Empty means paths.UserConfigFile(), which may be absent.
	UserFile string
	// Workspace, if set, is searched for the untrusted project config.
	Workspace string
}

// Load reads the user and project configs and returns the effective config.
// The default user config and the project config may be absent; a file
// named in opts.UserFile that does not exist, and any config file that is
// not a regular file, cannot be read or is invalid, is an *Error (vak
// refuses to run rather than guess).
func Load(opts Options) (*Config, error) {
	cfg := Default()
	userFile, required := opts.UserFile, opts.UserFile != ""
	if userFile == "" {
		f, err := paths.UserConfigFile()
		if err != nil {
			return nil, err
		}
		userFile = f
	}
	uw, exists, err := readFile(userFile, required, "")
	if err != nil {
		return nil, err
	}
	cfg.Sources = append(cfg.Sources, Source{Path: userFile, Trusted: true, Exists: exists})
	if uw != nil {
		if err := cfg.apply(userFile, uw, true); err != nil {
			return nil, withLine(err, uw.raw)
		}
	}
	if opts.Workspace != "" {
		pf := paths.ProjectConfigFile(opts.Workspace)
		pw, exists, err := readFile(pf, false, userFile)
		if err != nil {
			return nil, err
		}
		cfg.Sources = append(cfg.Sources, Source{Path: pf, Trusted: false, Exists: exists})
		if pw != nil {
			pw = cfg.strip(pf, pw)
			if err := cfg.apply(pf, pw, false); err != nil {
				return nil, withLine(err, pw.raw)
			}
		}
	}
	return cfg, nil
}

// Parse decodes and validates one trusted config document (for tests and
// tools that hold config in memory). name labels errors.
func Parse(name string, data []byte) (*Config, error) {
	w, err := decode(name, data, "")
	if err != nil {
		return nil, err
	}
	cfg := Default()
	cfg.Sources = []Source{{Path: name, Trusted: true, Exists: true}}
	if err := cfg.apply(name, w, true); err != nil {
		return nil, withLine(err, data)
	}
	return cfg, nil
}

// readFile reads and decodes one config file: an absent one is (nil,
// false, nil) unless required; a file that is absent but required, not a
// regular file or unreadable is an *Error naming it, as is its content.
// userFile is "" when path is the trusted user config, else the user
// config's path (see decode).
func readFile(path string, required bool, userFile string) (*fileWire, bool, error) {
	// Non-blocking: a FIFO in a config file's place must not hang vak
	// (it is refused below as not a regular file).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil, false, nil
	}
	if err != nil {
		msg := "cannot be read: " + causeOf(err).Error()
		if errors.Is(err, fs.ErrNotExist) {
			msg = "does not exist (a config file named explicitly must)"
		}
		return nil, false, &Error{File: path, Msg: msg, Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, true, &Error{File: path, Msg: "cannot be read: " + causeOf(err).Error(), Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, true, &Error{File: path, Msg: fmt.Sprintf("not a regular file (%s)", fi.Mode().Type())}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, true, &Error{File: path, Msg: "cannot be read: " + causeOf(err).Error(), Err: err}
	}
	if len(data) > MaxFileSize {
		return nil, true, &Error{File: path, Msg: fmt.Sprintf("larger than %d bytes", MaxFileSize)}
	}
	w, err := decode(path, data, userFile)
	return w, true, err
}

// causeOf is a path error's cause alone (the *Error names the file).
func causeOf(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// decode strictly decodes data; every error names file, line and key, and
// an unknown key the valid one nearest to it (unknownKey). userFile is ""
// when file is the trusted user config; for a project config it names the
// user config, where privileged keys belong.
func decode(file string, data []byte, userFile string) (*fileWire, error) {
	var w fileWire
	d := toml.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return nil, tomlError(file, err, userFile)
	}
	if w.Version == nil {
		return nil, &Error{File: file, Key: "version", Msg: fmt.Sprintf("missing; add `version = %d` at the top", Version)}
	}
	if *w.Version != Version {
		return nil, &Error{File: file, Line: lineOf(data, "version"), Key: "version", Msg: fmt.Sprintf("unsupported version %d (this vak understands %d)", *w.Version, Version)}
	}
	w.raw = data
	return &w, nil
}

func tomlError(file string, err error, userFile string) error {
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) && len(sm.Errors) > 0 {
		var errs []error
		for _, e := range sm.Errors {
			row, col := e.Position()
			errs = append(errs, &Error{File: file, Line: row, Column: col, Key: strings.Join(e.Key(), "."), Msg: unknownKey(e.Key(), userFile)})
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		return &Error{File: file, Line: row, Column: col, Key: strings.Join(de.Key(), "."), Msg: msg}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// unknownKey is the message for the unknown key path key: "unknown key",
// and the valid key nearest to its last segment when one is close. In a
// project config (userFile set) a suggestion only the user config may set
// says so: the fix is not one the project config can make.
func unknownKey(key []string, userFile string) string {
	n := len(key)
	if n == 0 {
		return "unknown key"
	}
	s := suggest.Nearest(key[n-1], suggest.TOMLKeys(reflect.TypeFor[fileWire](), key))
	if s == "" {
		return "unknown key"
	}
	msg := "unknown key; did you mean " + s + "?"
	if path := strings.Join(append(slices.Clone(key[:n-1]), s), "."); userFile != "" && !projectMaySet(path) {
		msg += fmt.Sprintf(" (%s is privileged: a project config may not set it, the user config %s may)", path, userFile)
	}
	return msg
}

// projectMaySet reports whether an untrusted project config may set the
// dotted key path, or a key below it when it is a table.
func projectMaySet(path string) bool {
	for k := range projectKeys {
		if k == path || strings.HasPrefix(k, path+".") {
			return true
		}
	}
	return false
}

// lineOf finds the first line that assigns key (best effort, for messages).
func lineOf(data []byte, key string) int {
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, key) && strings.HasPrefix(strings.TrimSpace(l[len(key):]), "=") {
			return i + 1
		}
	}
	return 0
}

// strip returns a copy of an untrusted wire config with only projectKeys set,
// recording a warning for every other key that was present.
func (c *Config) strip(file string, w *fileWire) *fileWire {
	for _, k := range setKeys(reflect.ValueOf(w).Elem(), "") {
		if !projectKeys[k] {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: ignoring %s: project config is untrusted and may not set privileged keys (set it in %s)", file, k, c.userFile()))
		}
	}
	out := &fileWire{Version: w.Version, raw: w.raw}
	if w.Sandbox != nil && (w.Sandbox.Mode != nil || w.Sandbox.Timeout != nil || w.Sandbox.Home != nil) {
		out.Sandbox = &sandboxWire{Mode: w.Sandbox.Mode, Timeout: w.Sandbox.Timeout, Home: w.Sandbox.Home}
	}
	if w.Files != nil && w.Files.Protected != nil {
		out.Files = &filesWire{Protected: w.Files.Protected}
	}
	if w.AgentNetwork != nil && w.AgentNetwork.Enabled != nil {
		out.AgentNetwork = &agentNetworkWire{Enabled: w.AgentNetwork.Enabled}
	}
	return out
}

// userFile is the trusted user config of c's sources (for messages).
func (c *Config) userFile() string {
	for _, src := range c.Sources {
		if src.Trusted {
			return src.Path
		}
	}
	return "the user config"
}

// setKeys lists the dotted TOML keys of v's non-empty fields, leaves first.
func setKeys(v reflect.Value, prefix string) []string {
	var keys []string
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		switch fv.Kind() {
		case reflect.Pointer:
			if fv.IsNil() {
				continue
			}
			if fv.Elem().Kind() == reflect.Struct {
				keys = append(keys, setKeys(fv.Elem(), key+".")...)
				continue
			}
		case reflect.Slice, reflect.Map:
			if fv.IsNil() {
				continue
			}
		}
		keys = append(keys, key)
	}
	return keys
}

// apply validates w and merges it into c. Trusted files override; untrusted
// ones may only narrow.
func (c *Config) apply(file string, w *fileWire, trusted bool) error {
	if s := w.Sandbox; s != nil {
		if err := c.applySandbox(file, s, trusted); err != nil {
			return err
		}
		if l := s.Limits; l != nil {
			if err := c.applyLimits(file, l); err != nil {
				return err
			}
		}
		if err := c.applyHost(file, s); err != nil {
			return err
		}
	}
	if err := c.applySession(file, w.Session); err != nil {
		return err
	}
	if err := c.applyKubernetes(file, w.Kubernetes); err != nil {
		return err
	}
	if trusted && (w.Network != nil || w.Gateway != nil || w.Secrets != nil || w.Logins != nil) {
		if err := c.applyEgress(file, w); err != nil {
			return err
		}
	}
	if a := w.AgentNetwork; a != nil {
		if err := c.applyAgentNetwork(file, a, trusted); err != nil {
			return err
		}
	}
	if f := w.Files; f != nil {
		return c.applyFiles(file, f)
	}
	return nil
}

// keyErrorf returns the constructor of file's validation errors: each names
// the key at fault (withLine adds its line).
func keyErrorf(file string) func(key, format string, a ...any) error {
	return func(key, format string, a ...any) error {
		return &Error{File: file, Key: key, Msg: fmt.Sprintf(format, a...)}
	}
}

// applySandbox validates [sandbox]'s backend, mode, image, user, home and
// timeout; an untrusted file may only narrow the mode, choose a fresh home
// and shorten the timeout.
func (c *Config) applySandbox(file string, s *sandboxWire, trusted bool) error {
	errf := keyErrorf(file)
	if s.Backend != nil {
		n, err := sandbox.ParseName(*s.Backend)
		if err != nil {
			return errf("sandbox.backend", "%v", err)
		}
		c.Sandbox.Backend = n
	}
	if s.Mode != nil {
		m, err := sandbox.ParseMode(*s.Mode)
		if err != nil {
			return errf("sandbox.mode", "%v", err)
		}
		if trusted {
			c.Sandbox.Mode = m
		} else if m > c.Sandbox.Mode {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: ignoring sandbox.mode = %q: project config may only narrow the mode (effective %s)", file, m, c.Sandbox.Mode))
		} else {
			c.Sandbox.Mode = m
		}
	}
	if s.Image != nil {
		if err := validateImage(*s.Image); err != nil {
			return errf("sandbox.image", "%v", err)
		}
		c.Sandbox.Image = *s.Image
	}
	if s.Runtime != nil {
		if err := ValidateRuntime(*s.Runtime); err != nil {
			return errf("sandbox.runtime", "%v", err)
		}
		c.Sandbox.Runtime = *s.Runtime
	}
	if s.User != nil {
		switch u := User(*s.User); u {
		case UserHost, UserRoot:
			c.Sandbox.User = u
		default:
			return errf("sandbox.user", "unknown user %q (want %q or %q)", *s.User, UserHost, UserRoot)
		}
	}
	if s.Home != nil {
		h, err := sandbox.ParseHome(*s.Home)
		switch {
		case err != nil:
			return errf("sandbox.home", "%v", err)
		case trusted || h.Kind == sandbox.HomeFresh:
			c.Sandbox.Home, c.Sandbox.HomeSet = h, true
		default:
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: ignoring sandbox.home = %q: project config may only choose \"fresh\" (effective %s)", file, *s.Home, c.Sandbox.Home))
		}
	}
	if s.Timeout != nil {
		d, err := time.ParseDuration(*s.Timeout)
		if err != nil || d < 0 {
			return errf("sandbox.timeout", "invalid duration %q (e.g. \"90s\", \"10m\")", *s.Timeout)
		}
		switch {
		case trusted:
			c.Sandbox.Timeout = d
		case d == 0 || (c.Sandbox.Timeout != 0 && d > c.Sandbox.Timeout):
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: ignoring sandbox.timeout = %q: project config may only shorten the timeout", file, *s.Timeout))
		default:
			c.Sandbox.Timeout = d
		}
	}
	return nil
}

// applyLimits validates [sandbox.limits].
func (c *Config) applyLimits(file string, l *limitsWire) error {
	errf := keyErrorf(file)
	if l.Memory != nil {
		n, err := ParseSize(*l.Memory)
		if err != nil || n < 6<<20 {
			return errf("sandbox.limits.memory", "invalid size %q (e.g. \"2g\"; at least 6m)", *l.Memory)
		}
		c.Sandbox.Limits.Memory = n
	}
	if l.CPUs != nil {
		if *l.CPUs <= 0 || *l.CPUs > 1024 {
			return errf("sandbox.limits.cpus", "must be a positive number of CPUs, got %v", *l.CPUs)
		}
		c.Sandbox.Limits.CPUs = *l.CPUs
	}
	if l.Pids != nil {
		if *l.Pids < 8 || *l.Pids > 1<<22 {
			return errf("sandbox.limits.pids", "must be between 8 and %d, got %d", 1<<22, *l.Pids)
		}
		c.Sandbox.Limits.Pids = int(*l.Pids)
	}
	if l.Tmpfs != nil {
		n, err := ParseSize(*l.Tmpfs)
		if err != nil || n < 1<<20 {
			return errf("sandbox.limits.tmpfs", "invalid size %q (e.g. \"512m\"; at least 1m)", *l.Tmpfs)
		}
		c.Sandbox.Limits.TmpfsSize = n
	}
	return nil
}

// applyHost validates what [sandbox] grants of the host: allow_weaker, read,
// write and env (trusted files only: strip removes them from the others).
func (c *Config) applyHost(file string, s *sandboxWire) error {
	errf := keyErrorf(file)
	if s.AllowWeaker != nil {
		c.Sandbox.AllowWeaker = *s.AllowWeaker
	}
	for i, p := range s.Read {
		abs, err := hostPath(p)
		if err != nil {
			return errf(fmt.Sprintf("sandbox.read[%d]", i), "%v", err)
		}
		c.Sandbox.ReadPaths = append(c.Sandbox.ReadPaths, abs)
	}
	for i, p := range s.Write {
		abs, err := hostPath(p)
		if err != nil {
			return errf(fmt.Sprintf("sandbox.write[%d]", i), "%v", err)
		}
		c.Sandbox.WritePaths = append(c.Sandbox.WritePaths, abs)
	}
	for i, n := range s.Env {
		if !envName().MatchString(n) {
			return errf(fmt.Sprintf("sandbox.env[%d]", i), "%q is not an environment variable name", n)
		}
		c.Sandbox.Env = append(c.Sandbox.Env, n)
	}
	return nil
}

// applyEgress validates [network], [gateway], [secrets] and [logins] (trusted files
// only) and keeps the decoded sections next to the validated policy.
func (c *Config) applyEgress(file string, w *fileWire) error {
	errf := keyErrorf(file)
	sections := &egressconfig.Sections{Network: w.Network, Gateway: w.Gateway, Secrets: w.Secrets, Logins: w.Logins}
	eg, err := egressconfig.Validate(file, sections)
	var fe *egressconfig.FieldError
	if errors.As(err, &fe) {
		return errf(fe.Field, "%v", fe.Err)
	} else if err != nil {
		return err
	}
	c.Egress, c.EgressSections, c.EgressFile, c.Network = eg, sections, file, eg.Mode
	return nil
}

// applyFiles validates [files].
func (c *Config) applyFiles(file string, f *filesWire) error {
	errf := keyErrorf(file)
	for i, p := range f.Protected {
		clean, err := cleanRelative(p)
		if err != nil {
			return errf(fmt.Sprintf("files.protected[%d]", i), "%v", err)
		}
		if !slices.Contains(c.Files.Protected, clean) {
			c.Files.Protected = append(c.Files.Protected, clean)
		}
	}
	return nil
}

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// hostPath expands a leading "~/" and requires an absolute path that does
// not contain vak's own config or state (a sandbox must never reach them).
func hostPath(p string) (string, error) {
	if strings.HasPrefix(p, "~/") {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		p = filepath.Join(h, p[2:])
	}
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%q must be an absolute path (or start with ~/)", p)
	}
	p = filepath.Clean(p)
	for _, guard := range []func() (string, error){paths.ConfigDir, paths.StateDir} {
		if g, err := guard(); err == nil && (paths.Within(p, g) || paths.Within(g, p)) {
			return "", fmt.Errorf("%q overlaps vak's own directory %s", p, g)
		}
	}
	if p == "/" {
		return "", fmt.Errorf("%q would expose the whole filesystem", p)
	}
	return p, nil
}

// cleanRelative validates a workspace-relative path.
func cleanRelative(p string) (string, error) {
	if p == "" || filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%q must be a non-empty path relative to the workspace", p)
	}
	c := filepath.Clean(p)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q is not inside the workspace", p)
	}
	return c, nil
}

// runtimeName is what dockerd accepts as a runtime's name.
var runtimeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ValidateRuntime checks a Docker runtime name (sandbox.runtime,
// --runtime): letters, digits, '_', '.', '-', not starting with a
// punctuation mark. Whether the Engine lists it is the backend's check.
func ValidateRuntime(s string) error {
	if !runtimeName.MatchString(s) || len(s) > 128 {
		return fmt.Errorf("%q is not a Docker runtime name (e.g. \"runsc\"; `docker info` lists the Engine's)", s)
	}
	return nil
}

func validateImage(s string) error {
	if s == "" || strings.TrimSpace(s) != s || strings.ContainsAny(s, " \t\n\x00") || strings.HasPrefix(s, "-") {
		return fmt.Errorf("invalid image reference %q", s)
	}
	return nil
}

// ParseSize parses a byte size: a number with an optional k, m, g or t suffix
// (binary multiples; a trailing "b"/"ib" is accepted).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:len(t)-1]
		}
	}
	var n int64
	if t == "" {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	for _, ch := range t {
		if ch < '0' || ch > '9' {
			return 0, fmt.Errorf("invalid size %q", s)
		}
		n = n*10 + int64(ch-'0')
		if n > 1<<50 {
			return 0, fmt.Errorf("size %q too large", s)
		}
	}
	return n * mult, nil
}
