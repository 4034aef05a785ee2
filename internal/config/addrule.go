package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"vak/internal/paths"
)

// AddedRule is a [[network.rules]] entry a person's answer adds to the
// user config (`vak gateway allow ID --always`, `deny ID --always`).
type AddedRule struct {
	Name    string
	Comment string // one line, written above the rule
	Deny    bool
	// Host is a name, or an IP literal (written as a /32 or /128 cidr).
	Host       string
	Port       uint16
	Method     string // empty: any
	PathPrefix string // empty: any
}

// check refuses values a rule could not hold exactly (an ask's host is
// already normalized: ASCII; names and paths are text without control
// characters), so that the rule written is exactly the one answered.
func (r AddedRule) check() error {
	for _, f := range []struct {
		what, v string
		ascii   bool
	}{{"name", r.Name, false}, {"host", r.Host, true}, {"method", r.Method, true}, {"path", r.PathPrefix, false}} {
		if !utf8.ValidString(f.v) || strings.IndexFunc(f.v, func(c rune) bool { return c < 0x20 || c == 0x7f || f.ascii && c > 0x7e }) >= 0 {
			return fmt.Errorf("config: the %s %q holds characters a rule cannot: add the rule to the user config yourself", f.what, f.v)
		}
	}
	return nil
}

// toml is the rule as the TOML appended to the file.
func (r AddedRule) toml() ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n# %s\n[[network.rules]]\nname = %s\n", oneLine(r.Comment), strconv.Quote(r.Name))
	if r.Deny {
		b.WriteString("action = \"deny\"\n")
	}
	if a, err := netip.ParseAddr(r.Host); err == nil {
		fmt.Fprintf(&b, "cidrs = [%s]\n", strconv.Quote(netip.PrefixFrom(a, a.BitLen()).String()))
	} else if r.Host != "" {
		fmt.Fprintf(&b, "hosts = [%s]\n", strconv.Quote(r.Host))
	} else {
		return nil, errors.New("config: an added rule needs a host")
	}
	if r.Port != 0 {
		fmt.Fprintf(&b, "ports = [%d]\n", r.Port)
	}
	if r.Method != "" {
		fmt.Fprintf(&b, "methods = [%s]\n", strconv.Quote(r.Method))
	}
	if r.PathPrefix != "" {
		fmt.Fprintf(&b, "paths = [%s]\n", strconv.Quote(r.PathPrefix))
	}
	return b.Bytes(), nil
}

// oneLine is s fit for a TOML comment: control characters (which a
// comment may not hold, and a newline would end it) become spaces.
func oneLine(s string) string {
	return string(bytes.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, []byte(s)))
}

// AddRule appends r to the trusted user config file (empty: the default
// one, paths.UserConfigFile), after the rules already there, so that an
// earlier rule still decides first. The file is replaced atomically with
// its mode kept, and only if the result loads: otherwise it is left as it
// was and the error names the file. Rules are never added to a project
// config. It returns the file written.
func AddRule(userFile string, r AddedRule) (string, error) {
	if userFile == "" {
		f, err := paths.UserConfigFile()
		if err != nil {
			return "", err
		}
		userFile = f
	}
	add, err := r.toml()
	if err != nil {
		return "", err
	}
	old, err := os.ReadFile(userFile)
	mode := fs.FileMode(0o600)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = []byte("version = 1\n")
		if err := os.MkdirAll(filepath.Dir(userFile), 0o700); err != nil {
			return "", err
		}
	case err != nil:
		return "", err
	default:
		if fi, err := os.Stat(userFile); err == nil {
			mode = fi.Mode().Perm()
		}
	}
	next := bytes.Clone(old)
	if len(next) > 0 && next[len(next)-1] != '\n' {
		next = append(next, '\n')
	}
	next = append(next, add...)
	if _, err := Parse(userFile, next); err != nil {
		return "", fmt.Errorf("%s: adding the rule would make the config invalid (it is left as it was): %w", userFile, err)
	}
	tmp := userFile + ".vak-tmp"
	if err := os.WriteFile(tmp, next, mode); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, userFile); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return userFile, nil
}
