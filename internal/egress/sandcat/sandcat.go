// Package sandcat converts a sandcat settings.json (the mitmproxy-addon
// sandbox this gateway replaces) into vak's [network] and [secrets] TOML,
// reporting everything it cannot carry over. The conversion never widens
// access: an allow rule or secret host it cannot express is dropped (and
// reported); a deny rule it cannot express fails the conversion, because
// dropping it would let later allow rules match more.
package sandcat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"vak/internal/egress/egressconfig"
	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
)

// ErrUnconvertible means the settings cannot be converted without widening
// access.
var ErrUnconvertible = errors.New("sandcat: settings cannot be converted safely")

// Result is a conversion.
type Result struct {
	// TOML is the vak configuration (it holds secret values when the
	// settings did: write it only to the trusted user config, mode 0600).
	TOML []byte
	// Notes lists what was not (or not exactly) carried over.
	Notes []string
}

type networkRule struct {
	Action string `json:"action"`
	Host   string `json:"host"`
	Method string `json:"method"`
}

// Convert converts settings (the contents of file, named in messages).
func Convert(file string, data []byte) (*Result, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("sandcat: %s: %w", file, err)
	}
	res := &Result{}
	note := func(format string, args ...any) { res.Notes = append(res.Notes, fmt.Sprintf(format, args...)) }
	for _, k := range sortedKeys(top) {
		if k != "env" && k != "secrets" && k != "network" {
			note("%s: key %q is not a sandcat setting vak knows; ignored", file, k)
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Converted from sandcat settings %s by `vak gateway import-sandcat`.\n", file)
	b.WriteString("# Review before use; see the notes printed with this output.\n\n")
	b.WriteString("[network]\npolicy = \"proxied\"\n")

	if raw, ok := top["network"]; ok {
		var rules []json.RawMessage
		if err := json.Unmarshal(raw, &rules); err != nil {
			return nil, fmt.Errorf("sandcat: %s: network must be a list of rules: %w", file, err)
		}
		for i, rr := range rules {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(rr, &fields); err != nil {
				return nil, fmt.Errorf("sandcat: %s: network[%d]: %w", file, i, err)
			}
			for _, k := range sortedKeys(fields) {
				if k != "action" && k != "host" && k != "method" {
					note("network[%d]: field %q not mapped; ignored", i, k)
				}
			}
			var r networkRule
			if err := json.Unmarshal(rr, &r); err != nil {
				return nil, fmt.Errorf("sandcat: %s: network[%d]: %w", file, i, err)
			}
			if r.Action != "allow" && r.Action != "deny" {
				if r.Action == "" {
					return nil, fmt.Errorf("%w: network[%d] has no action", ErrUnconvertible, i)
				}
				return nil, fmt.Errorf("%w: network[%d]: unknown action %q", ErrUnconvertible, i, r.Action)
			}
			host, why := convertHost(r.Host)
			if why != "" {
				if r.Action == "deny" {
					return nil, fmt.Errorf("%w: network[%d]: deny rule host %q: %s (dropping it would widen access)", ErrUnconvertible, i, r.Host, why)
				}
				note("network[%d]: allow rule for host %q dropped: %s", i, r.Host, why)
				continue
			}
			method := strings.ToUpper(r.Method)
			if method != "" && !isMethod(method) {
				if r.Action == "deny" {
					return nil, fmt.Errorf("%w: network[%d]: deny rule method %q is not an HTTP method", ErrUnconvertible, i, r.Method)
				}
				note("network[%d]: allow rule with method %q dropped: not an HTTP method", i, r.Method)
				continue
			}
			fmt.Fprintf(&b, "\n[[network.rules]]\nname = %s\naction = %s\nhosts = [%s]\n",
				tomlString(fmt.Sprintf("sandcat network[%d]", i)), tomlString(r.Action), tomlString(host))
			if method != "" {
				fmt.Fprintf(&b, "methods = [%s]\n", tomlString(method))
			}
		}
		note("sandcat let non-HTTP TCP and UDP through unfiltered; vak denies them unless a rule with protocol = \"tcp\" names host and ports")
		note("sandcat decided on the Host header; vak decides on the TLS SNI and requires Host to match it")
	}

	if raw, ok := top["secrets"]; ok {
		var secs map[string]json.RawMessage
		if err := json.Unmarshal(raw, &secs); err != nil {
			return nil, fmt.Errorf("sandcat: %s: secrets must be an object: %w", file, err)
		}
		converted := 0
		for _, name := range sortedKeys(secs) {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(secs[name], &fields); err != nil {
				return nil, fmt.Errorf("sandcat: %s: secrets.%s: %w", file, name, err)
			}
			for _, k := range sortedKeys(fields) {
				if k != "value" && k != "hosts" {
					note("secrets.%s: field %q not mapped; ignored", name, k)
				}
			}
			var s struct {
				Value string   `json:"value"`
				Hosts []string `json:"hosts"`
			}
			if err := json.Unmarshal(secs[name], &s); err != nil {
				return nil, fmt.Errorf("sandcat: %s: secrets.%s: %w", file, name, err)
			}
			if !secrets.ValidName(name) {
				note("secrets.%s: not a valid environment variable name; secret dropped", name)
				continue
			}
			if len(s.Value) < secrets.MinValueLen {
				note("secrets.%s: value shorter than %d bytes cannot be redacted safely; secret dropped", name, secrets.MinValueLen)
				continue
			}
			var hosts []string
			for _, h := range s.Hosts {
				ch, why := convertHost(h)
				if why == "" && ch == "*" {
					why = "a secret may not be sent to every host"
				}
				if why != "" {
					note("secrets.%s: host %q dropped: %s", name, h, why)
					continue
				}
				hosts = append(hosts, tomlString(ch))
			}
			if len(hosts) == 0 {
				note("secrets.%s: no usable hosts; secret dropped", name)
				continue
			}
			fmt.Fprintf(&b, "\n[secrets.%s]\nvalue = %s\nhosts = [%s]\n", name, tomlString(s.Value), strings.Join(hosts, ", "))
			converted++
		}
		if converted > 0 {
			note("sandcat substituted placeholders anywhere in a request; vak injects into headers only: add inject = [\"header\", \"query\", \"body\"] to a secret that needs more")
			note("placeholders change: sandcat used SANDCAT_PLACEHOLDER_<NAME>, vak gives each session random placeholders (`vak gateway` admin env)")
			note("the output holds secret values: keep it in your user config (mode 0600), or move values to env = \"VAR\" / file = \"/path\"")
		}
	}

	if raw, ok := top["env"]; ok {
		var env map[string]string
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, fmt.Errorf("sandcat: %s: env must map names to strings: %w", file, err)
		}
		for _, k := range sortedKeys(env) {
			note("env.%s: plain environment variables are not gateway configuration; set it in the sandbox environment instead", k)
		}
	}

	res.TOML = b.Bytes()
	// The output must itself be valid vak configuration.
	s, err := egressconfig.Decode("converted", res.TOML)
	if err == nil {
		_, err = egressconfig.Validate("converted", s)
	}
	if err != nil {
		return nil, fmt.Errorf("sandcat: converted configuration does not validate (a bug): %w", err)
	}
	return res, nil
}

// convertHost maps an fnmatch host pattern to a vak host pattern, or says
// why it cannot.
func convertHost(h string) (string, string) {
	if h == "" {
		return "", "empty host"
	}
	if h == "*" {
		return "*", ""
	}
	rest, _ := strings.CutPrefix(h, "*.")
	if strings.ContainsAny(rest, "*?[]") {
		return "", "fnmatch wildcards other than a leading \"*.\" have no vak equivalent"
	}
	p, err := policy.ParseHostPattern(h)
	if err != nil {
		if hh, herr := policy.NormalizeHost(h); herr == nil && hh.IsIP() {
			return "", "IP addresses need a cidrs rule; add it by hand"
		}
		return "", err.Error()
	}
	return p.String(), ""
}

var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}

func isMethod(m string) bool { return slices.Contains(methods, m) }

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
