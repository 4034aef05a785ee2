package gateway

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"vak/internal/egress/logins"
	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
)

// The gateway's side of phantom login tokens (internal/egress/logins): the
// store of real tokens lives in the state directory, its tokens are
// secrets of the session next to the configured ones, and the proxy hands
// every token endpoint's response to TokenResponse before the sandbox
// sees it.

// openLogins opens the login store of the state directory.
func (g *Gateway) openLogins() error {
	st, err := logins.OpenStore(filepath.Join(g.opts.StateDir, logins.StoreFile))
	if err != nil {
		return err
	}
	g.logins = st
	return nil
}

// mergeImported merges the host store's tokens handed to a gateway with a
// store of its own (logins.ImportFile in the state directory: a container's
// or a pod's gateway), if there is such a file. A file that does not parse
// is an error naming it: the imported phantoms would fail silently.
func (g *Gateway) mergeImported() error {
	path := filepath.Join(g.opts.StateDir, logins.ImportFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return g.logins.Merge(path, data)
}

// sessionLocked builds and installs the session from the configured
// secrets and the stored login tokens of the configured providers,
// keeping every placeholder. g.sessMu is held.
func (g *Gateway) sessionLocked(cfgSecrets []*secrets.Secret, providers []logins.Provider) error {
	toks, err := g.logins.Secrets(providers)
	if err != nil {
		return err
	}
	sess := secrets.NewSession(append(append([]*secrets.Secret(nil), cfgSecrets...), toks...), g.prevSession())
	g.cfgSecrets, g.providers = cfgSecrets, providers
	g.sess.Store(sess)
	g.savePlaceholders(sess)
	return nil
}

// loginHook is what the proxy calls (proxy.LoginHandler).
type loginHook struct{ g *Gateway }

// TokenEndpoint names the configured login whose token endpoint host and
// path are, or "". It runs for every request: it reads the applied
// configuration without a lock.
func (h loginHook) TokenEndpoint(host policy.Host, path string) string {
	cfg := h.g.cfg.Load()
	if cfg == nil {
		return ""
	}
	for i := range cfg.Logins {
		if cfg.Logins[i].Match(host, path) {
			return cfg.Logins[i].Name
		}
	}
	return ""
}

// TokenResponse rewrites a token endpoint's (decoded) response body:
// tokens become phantoms, the real ones go to the store and into the
// session before the sandbox gets the body. Nothing is rewritten in a
// response without tokens.
func (h loginHook) TokenResponse(login string, header http.Header, body []byte) ([]byte, error) {
	g := h.g
	out, toks, err := logins.Rewrite(login, body, header.Get("Content-Type"), func(field, real string) string {
		return g.logins.Known(login, field, real)
	})
	if err != nil || len(toks) == 0 {
		return out, err
	}
	g.sessMu.Lock()
	defer g.sessMu.Unlock()
	if err := g.logins.Add(toks...); err != nil {
		return nil, err
	}
	if err := g.sessionLocked(g.cfgSecrets, g.providers); err != nil {
		return nil, err
	}
	g.logf("login %s: %d token(s) kept on the host, phantoms sent to the sandbox", login, len(toks))
	return out, nil
}
