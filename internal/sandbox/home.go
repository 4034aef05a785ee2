package sandbox

import (
	"fmt"
	"strings"
	"unicode"

	"vak/internal/errclass"
)

// HomeKind is what kind of home a sandbox gets (package agenthome keeps
// the persistent ones).
type HomeKind string

// Kinds of home.
const (
	HomeFresh     HomeKind = "fresh"
	HomeWorkspace HomeKind = "workspace"
	HomeProfile   HomeKind = "profile"
)

// DefaultHome is the home a run gets when neither the trusted config nor the
// command line names one: agents keep their settings, history and caches
// between runs in the same workspace, and nothing of the real home.
var DefaultHome = HomeChoice{Kind: HomeWorkspace}

// MaxProfileNameLen bounds a profile name.
const MaxProfileNameLen = 64

// ErrInvalidHome reports an unusable home choice or profile name.
var ErrInvalidHome = errclass.New(errclass.Config, "invalid home")

// HomeChoice is a parsed home choice ("fresh", "workspace", "profile:NAME").
type HomeChoice struct {
	Kind HomeKind
	// Name is the profile name (Kind Profile only).
	Name string
}

// String is the choice as ParseHome reads it.
func (c HomeChoice) String() string {
	if c.Kind == HomeProfile {
		return string(HomeProfile) + ":" + c.Name
	}
	if c.Kind == "" {
		return DefaultHome.String()
	}
	return string(c.Kind)
}

// ParseHome reads a home choice: "fresh", "workspace" or "profile:NAME".
func ParseHome(s string) (HomeChoice, error) {
	switch {
	case s == string(HomeFresh):
		return HomeChoice{Kind: HomeFresh}, nil
	case s == string(HomeWorkspace):
		return HomeChoice{Kind: HomeWorkspace}, nil
	case strings.HasPrefix(s, string(HomeProfile)+":"):
		name := s[len(HomeProfile)+1:]
		if err := ValidateProfileName(name); err != nil {
			return HomeChoice{}, err
		}
		return HomeChoice{Kind: HomeProfile, Name: name}, nil
	}
	return HomeChoice{}, fmt.Errorf("%w %q: want fresh, workspace or profile:NAME", ErrInvalidHome, s)
}

// ValidateProfileName accepts a profile name of 1 to MaxProfileNameLen letters, digits,
// '.', '_' and '-' that starts with a letter or digit and holds no "..":
// it names one directory below homes/profile and nothing else.
func ValidateProfileName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: profile name %q %s", ErrInvalidHome, name, why)
	}
	switch {
	case name == "":
		return bad("is empty")
	case len(name) > MaxProfileNameLen:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxProfileNameLen))
	case strings.Contains(name, ".."):
		return bad("contains \"..\"")
	}
	for i, r := range name {
		ok := r < unicode.MaxASCII && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '.' || r == '_' || r == '-')))
		if !ok {
			if r == '/' {
				return bad("contains '/'")
			}
			if unicode.IsControl(r) {
				return bad("contains a control character")
			}
			return bad("may hold only letters, digits, '.', '_' and '-' and must start with a letter or digit")
		}
	}
	return nil
}
