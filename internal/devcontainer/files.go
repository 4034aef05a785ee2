package devcontainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// ErrBroken reports a template file that does not parse, or no longer does
// what the template needs; the error names the file (and the line, for a
// parse error).
var ErrBroken = errors.New("devcontainer: the template is broken")

// maxFileSize bounds a template file vak reads (they are written by init,
// and a workspace's own files are not trusted to be small).
const maxFileSize = 1 << 20

// CheckFiles checks the workspace's template files as the dev-containers
// tooling reads them: devcontainer.json parses (JSON with comments), names
// compose.yml and runs `vak devcontainer prepare` (for this workspace, when
// it names one) as its initializeCommand, without which nothing fills the
// gateway's volume; compose.yml parses (YAML) and has the template's
// services. It returns the problems, each wrapping ErrBroken and naming
// its file.
func CheckFiles(ws string) []error {
	var errs []error
	if err := checkDevcontainerJSON(ws); err != nil {
		errs = append(errs, err)
	}
	c, err := readCompose(ws)
	if err != nil {
		return append(errs, err)
	}
	p := filepath.Join(ws, Dir, ComposeFile)
	for _, svc := range Services {
		if _, ok := c.Services[svc]; !ok {
			errs = append(errs, fmt.Errorf("%w: %s has no %s service: run vak devcontainer init --force", ErrBroken, p, svc))
		}
	}
	return errs
}

// readFile reads one of the workspace's template files (name relative to
// Dir), at most maxFileSize bytes.
func readFile(ws, name string) ([]byte, string, error) {
	p := filepath.Join(ws, Dir, name)
	f, err := os.Open(p)
	if err != nil {
		return nil, p, fmt.Errorf("devcontainer: %w (run vak devcontainer init)", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, p, fmt.Errorf("devcontainer: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, p, fmt.Errorf("%w: %s is larger than %d bytes", ErrBroken, p, maxFileSize)
	}
	return data, p, nil
}

// composeFile is what vak reads of a compose file.
type composeFile struct {
	Services map[string]struct {
		// Environment is a list of NAME=VALUE or a mapping.
		Environment yaml.Node `yaml:"environment"`
	} `yaml:"services"`
}

// readCompose parses the workspace's compose.yml; a parse error names the
// file and line.
func readCompose(ws string) (*composeFile, error) {
	data, p, err := readFile(ws, ComposeFile)
	if err != nil {
		return nil, err
	}
	return parseCompose(p, data)
}

// parseCompose parses compose file p's data (see readCompose).
func parseCompose(p string, data []byte) (*composeFile, error) {
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		// The YAML parser places a syntax error at the start of the
		// mapping it is in; in the JSON init writes, JSON's own parser
		// finds the line of the mistake.
		if line, msg, ok := jsonSyntaxError(data); ok {
			return nil, fmt.Errorf("%w: %s:%d: %s", ErrBroken, p, line, msg)
		}
		return nil, fmt.Errorf("%w: %s", ErrBroken, yamlError(p, err))
	}
	if c.Services == nil {
		return nil, fmt.Errorf("%w: %s has no services: run vak devcontainer init --force", ErrBroken, p)
	}
	return &c, nil
}

var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`) })

// yamlError puts the file and line of a YAML error first: FILE:LINE: msg.
func yamlError(file string, err error) string {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []string
	for _, m := range msgs {
		if s := yamlLine().FindStringSubmatch(m); s != nil {
			out = append(out, file+":"+s[1]+": "+s[2])
		} else {
			out = append(out, file+": "+strings.TrimPrefix(m, "yaml: "))
		}
	}
	return strings.Join(out, "; ")
}

// jsonSyntaxError finds the line of the syntax error in data when it is
// JSON (as init writes compose.yml: comment lines, then an object).
func jsonSyntaxError(data []byte) (line int, msg string, ok bool) {
	clean := bytes.Clone(data)
	for off := 0; off < len(clean); {
		end := bytes.IndexByte(clean[off:], '\n')
		if end < 0 {
			end = len(clean) - off
		}
		if l := bytes.TrimSpace(clean[off : off+end]); len(l) > 0 && l[0] == '#' {
			for k := off; k < off+end; k++ {
				clean[k] = ' '
			}
		}
		off += end + 1
	}
	if t := bytes.TrimSpace(clean); len(t) == 0 || t[0] != '{' {
		return 0, "", false
	}
	var v any
	var se *json.SyntaxError
	if err := json.Unmarshal(clean, &v); errors.As(err, &se) {
		return lineAt(clean, se.Offset), se.Error(), true
	}
	return 0, "", false
}

// env returns service svc's environment (NAME=VALUE list or mapping) as
// NAME -> VALUE.
func (c *composeFile) env(svc string) map[string]string {
	out := map[string]string{}
	n := c.Services[svc].Environment
	switch n.Kind {
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if k, v, ok := strings.Cut(e.Value, "="); ok && e.Kind == yaml.ScalarNode {
				out[k] = v
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out[n.Content[i].Value] = n.Content[i+1].Value
		}
	}
	return out
}

// checkDevcontainerJSON checks devcontainer.json (see CheckFiles).
func checkDevcontainerJSON(ws string) error {
	data, p, err := readFile(ws, ConfigFile)
	if err != nil {
		return err
	}
	return checkConfig(p, ws, data)
}

// checkConfig checks devcontainer.json p's data for workspace ws.
func checkConfig(p, ws string, data []byte) error {
	var cfg struct {
		DockerComposeFile json.RawMessage `json:"dockerComposeFile"`
		InitializeCommand json.RawMessage `json:"initializeCommand"`
	}
	clean := stripJSONC(data)
	if err := json.Unmarshal(clean, &cfg); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%w: %s:%d: %v", ErrBroken, p, lineAt(clean, se.Offset), err)
		}
		return fmt.Errorf("%w: %s: %v", ErrBroken, p, err)
	}
	var files []string
	if json.Unmarshal(cfg.DockerComposeFile, &files) != nil {
		var one string
		json.Unmarshal(cfg.DockerComposeFile, &one)
		files = []string{one}
	}
	if !slices.ContainsFunc(files, func(f string) bool { return filepath.Clean(f) == ComposeFile }) {
		return fmt.Errorf("%w: %s: dockerComposeFile does not name %s (the template's compose file): run vak devcontainer init --force", ErrBroken, p, ComposeFile)
	}
	for _, argv := range commands(cfg.InitializeCommand) {
		if prepares(argv, ws) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s: initializeCommand does not run vak devcontainer prepare --workspace %s (it fills the gateway's volume before compose starts): run vak devcontainer init --force", ErrBroken, p, ws)
}

// commands returns the argvs of an initializeCommand: a string (split on
// white space), an array, or an object of either.
func commands(raw json.RawMessage) [][]string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]string{strings.Fields(s)}
	}
	var argv []string
	if json.Unmarshal(raw, &argv) == nil {
		return [][]string{argv}
	}
	var named map[string]json.RawMessage
	if json.Unmarshal(raw, &named) != nil {
		return nil
	}
	var out [][]string
	for _, k := range slices.Sorted(maps.Keys(named)) {
		if c := commands(named[k]); len(c) == 1 {
			out = append(out, c[0])
		}
	}
	return out
}

// prepares reports whether argv runs `... devcontainer prepare`, and for
// ws when it names a workspace (--workspace, -w).
func prepares(argv []string, ws string) bool {
	i := slices.Index(argv, "devcontainer")
	if i < 1 || i+1 >= len(argv) || argv[i+1] != "prepare" {
		return false
	}
	rest := argv[i+2:]
	for j, a := range rest {
		v, ok := "", false
		switch {
		case (a == "--workspace" || a == "-w") && j+1 < len(rest):
			v, ok = rest[j+1], true
		case strings.HasPrefix(a, "--workspace="):
			v, ok = strings.TrimPrefix(a, "--workspace="), true
		}
		if ok && filepath.Clean(v) != filepath.Clean(ws) {
			return false
		}
	}
	return true
}

// stripJSONC turns JSON with comments and trailing commas (what
// devcontainer.json allows) into JSON, replacing what it drops with spaces
// so that offsets and lines stay those of the file.
func stripJSONC(data []byte) []byte {
	out := bytes.Clone(data)
	blank := func(from, to int) {
		for k := from; k < to && k < len(out); k++ {
			if out[k] != '\n' {
				out[k] = ' '
			}
		}
	}
	lastComma := -1
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '"':
			for i++; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
			lastComma = -1
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			end := bytes.IndexByte(out[i:], '\n')
			if end < 0 {
				end = len(out) - i
			}
			blank(i, i+end)
			i += end - 1
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				end = len(out) - i - 2
			}
			blank(i, i+end+4)
			i += end + 3
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma = -1
		}
	}
	return out
}

// lineAt is the 1-based line of byte offset off in data.
func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return bytes.Count(data[:off], []byte("\n")) + 1
}
