package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"

	"vak/internal/egress/secrets"
)

// placeholdersFile, in the state dir, keeps the placeholders across a
// restart of the gateway with the same state (the proxied topology's
// gateway container): sandboxes that joined before the restart still hold
// them. Placeholders are not secrets (every sandbox sees them); the file is
// 0600 anyway.
const placeholdersFile = "placeholders.json"

// prevSession is the Session whose placeholders apply keeps: the running
// one, or at start the one saved by the previous run.
func (g *Gateway) prevSession() *secrets.Session {
	if s := g.sess.Load(); s != nil {
		return s
	}
	data, err := os.ReadFile(filepath.Join(g.opts.StateDir, placeholdersFile))
	if err != nil {
		return nil
	}
	var m map[string]string
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return secrets.SeedSession(m)
}

// savePlaceholders writes the current placeholders (best effort).
func (g *Gateway) savePlaceholders(s *secrets.Session) {
	data, err := json.Marshal(s.Env())
	if err != nil {
		return
	}
	p := filepath.Join(g.opts.StateDir, placeholdersFile)
	os.MkdirAll(g.opts.StateDir, 0o700)
	if os.WriteFile(p+".tmp", data, 0o600) == nil {
		os.Rename(p+".tmp", p)
	}
}
