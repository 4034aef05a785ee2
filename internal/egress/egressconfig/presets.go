package egressconfig

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// presetFS holds the built-in presets, one readable TOML file each
// (presets/NAME.toml in the repository).
//
//go:embed presets/*.toml
var presetFS embed.FS

// PresetVersion is the preset file format this build reads.
const PresetVersion = 1

// Preset is a built-in, versioned set of allow rules for a common service,
// named in [network] presets. Presets never carry secrets.
type Preset struct {
	Name        string
	Description string
	// Source is the preset's TOML file as shipped.
	Source []byte
	Rules  []Rule
}

// presetFile is a preset's TOML.
type presetFile struct {
	Version     int    `toml:"version"`
	Description string `toml:"description"`
	Rules       []Rule `toml:"rules"`
}

// ErrUnknownPreset reports a preset name that is not built in.
var ErrUnknownPreset = errors.New("unknown preset")

// Presets returns every built-in preset, sorted by name.
func Presets() ([]Preset, error) {
	ents, err := presetFS.ReadDir("presets")
	if err != nil {
		return nil, err
	}
	var out []Preset
	for _, e := range ents {
		p, err := LoadPreset(strings.TrimSuffix(e.Name(), ".toml"))
		if err != nil {
			return nil, err
		}
		out = append(out, *p)
	}
	return out, nil
}

// PresetList describes every built-in preset as `vak gateway presets`
// lists them: its name and description, then one line per allow rule.
func PresetList() (string, error) {
	ps, err := Presets()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s\t%s\n", p.Name, p.Description)
		for _, r := range p.Rules {
			b.WriteString("  allow " + strings.Join(r.Methods, ",") + " " + strings.Join(r.Hosts, " "))
			if len(r.Paths) > 0 {
				b.WriteString(" paths " + strings.Join(r.Paths, " "))
			}
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

// PresetNames lists the built-in presets' names, sorted.
func PresetNames() []string {
	ents, _ := presetFS.ReadDir("presets")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	slices.Sort(names)
	return names
}

// LoadPreset decodes the built-in preset name. Its rules are allow rules
// only (a preset widens, never narrows; a user's own rules come first).
func LoadPreset(name string) (*Preset, error) {
	if !slices.Contains(PresetNames(), name) {
		return nil, fmt.Errorf("%w %q (built in: %s)", ErrUnknownPreset, name, strings.Join(PresetNames(), ", "))
	}
	file := path.Join("presets", name+".toml")
	src, err := presetFS.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return parsePreset(name, file, src)
}

// parsePreset decodes and checks a preset's TOML (file names it in errors).
func parsePreset(name, file string, src []byte) (*Preset, error) {
	var pf presetFile
	dec := toml.NewDecoder(bytes.NewReader(src)).DisallowUnknownFields()
	if err := dec.Decode(&pf); err != nil {
		return nil, fmt.Errorf("%w: preset %s: %v", ErrInvalid, file, err)
	}
	if pf.Version != PresetVersion {
		return nil, fmt.Errorf("%w: preset %s: version %d, this build reads %d", ErrInvalid, file, pf.Version, PresetVersion)
	}
	if len(pf.Rules) == 0 {
		return nil, fmt.Errorf("%w: preset %s: no rules", ErrInvalid, file)
	}
	for i, r := range pf.Rules {
		if r.Action != nil && *r.Action != "allow" {
			return nil, fmt.Errorf("%w: preset %s: rules[%d].action: presets only allow", ErrInvalid, file, i)
		}
		if r.AllowForeignCredentials != nil && *r.AllowForeignCredentials {
			return nil, fmt.Errorf("%w: preset %s: rules[%d]: presets never allow foreign credentials", ErrInvalid, file, i)
		}
		if r.Name == nil {
			return nil, fmt.Errorf("%w: preset %s: rules[%d]: no name", ErrInvalid, file, i)
		}
		n := "preset:" + name + "/" + *r.Name
		pf.Rules[i].Name = &n
	}
	return &Preset{Name: name, Description: pf.Description, Source: src, Rules: pf.Rules}, nil
}
