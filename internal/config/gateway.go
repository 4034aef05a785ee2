package config

import (
	"vak/internal/egress/egressconfig"
	"vak/internal/paths"
)

// GatewayLoader returns the loader a gateway process uses at start and on
// every reload, and the file it reads: file, a standalone gateway config
// with only [network], [gateway] and [secrets], when set; otherwise the
// trusted user config userFile (empty: the default), whose warnings go to
// warn. A project config is never read: it could widen network access or
// add secrets.
func GatewayLoader(file, userFile string, warn func(string)) (func() (*egressconfig.Config, error), string, error) {
	if file != "" {
		return func() (*egressconfig.Config, error) { return egressconfig.LoadFile(file) }, file, nil
	}
	name := userFile
	if name == "" {
		f, err := paths.UserConfigFile()
		if err != nil {
			return nil, "", err
		}
		name = f
	}
	return func() (*egressconfig.Config, error) {
		cfg, err := Load(Options{UserFile: userFile})
		if err != nil {
			return nil, err
		}
		for _, w := range cfg.Warnings {
			warn(w)
		}
		if cfg.Egress == nil {
			return egressconfig.Validate(name, nil)
		}
		return cfg.Egress, nil
	}, name, nil
}
