package cli

import (
	"vak/internal/paths"
)

// userConfigFile is the trusted user config this invocation reads (for
// messages): --config, else the default path.
func (a *app) userConfigFile() string {
	if a.userConfig != "" {
		return a.userConfig
	}
	if f, err := paths.UserConfigFile(); err == nil {
		return f
	}
	return "the user config"
}
