package devcontainer_test

import (
	"errors"
	"strings"
	"testing"

	"vak/internal/config"
	"vak/internal/devcontainer"
	"vak/internal/errclass"
	"vak/internal/proxynet"
)

// Init refuses, before it writes anything, a trusted config without
// gateway policy (a config error) and a --preset that is unknown (an
// invalid request) or that the trusted config does not name (a config
// error); the messages keep what they wrap.
func TestInitRefusals(t *testing.T) {
	withPolicy := func(presets string) *config.Config {
		cfg, err := config.Parse("/u/config.toml", []byte("version = 1\n[network]\n"+presets+"\n[[network.rules]]\nname = \"x\"\nhosts = [\"example.com\"]\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, tc := range []struct {
		name    string
		cfg     *config.Config
		presets []string
		class   *errclass.Class
		is      error
		says    string
	}{
		{"no policy", config.Default(), nil, errclass.Config, proxynet.ErrNoPolicy, "(/u/config.toml has none)"},
		{"unknown preset", withPolicy(""), []string{"vscodium"}, errclass.Invalid, nil, `--preset "vscodium": unknown preset (built in: `},
		{"preset not named", withPolicy(""), []string{"vscode"}, errclass.Config, nil, `/u/config.toml does not name it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			err := devcontainer.Init(devcontainer.InitOptions{Workspace: ws, Config: tc.cfg, ConfigFile: "/u/config.toml", Presets: tc.presets})
			if err == nil {
				t.Fatal("init succeeded")
			}
			if got := errclass.Of(err); got != tc.class {
				t.Errorf("class %v, want %v: %v", got, tc.class, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), tc.class.Error()) {
				t.Errorf("message %q: want it to say %q and not its class", err, tc.says)
			}
		})
	}
}
