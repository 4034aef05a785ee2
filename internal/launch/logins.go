package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"vak/internal/agenthome"
	"vak/internal/config"
	"vak/internal/egress/admin"
	"vak/internal/egress/logins"
	"vak/internal/egress/ondemand"
	"vak/internal/errclass"
	"vak/internal/fsguard"
	"vak/internal/paths"
)

// Login imports (internal/egress/logins): a login a CLI keeps on the host
// moves into the login store of the on-demand gateway (the one native
// proxied runs use), and the agent home gets the CLI's login file with
// phantoms in place of the tokens, so the agent starts logged in and
// never holds a real token. The gateway containers of docker-backed runs,
// sessions and dev containers keep stores of their own: they get this
// store's tokens, and its removals, with their configuration
// (proxynet.Options.LoginStore) whenever a vak command starts or reuses
// them.

// LoginImport is what ImportLogin did.
type LoginImport struct {
	// Login is the [logins] entry the tokens belong to.
	Login string
	// Tokens is how many tokens moved into the store.
	Tokens int
	// Store is the store's file; HomeFile the phantom login file written.
	Store, HomeFile string
	// Reloaded is set when a running gateway picked the tokens up now.
	Reloaded bool
}

// LoginStore is the login store of the on-demand gateway: in vak's state
// directory, which is its state directory.
func LoginStore() (*logins.Store, error) {
	state, err := paths.StateDir()
	if err != nil {
		return nil, err
	}
	return logins.OpenStore(filepath.Join(state, logins.StoreFile))
}

// maxLoginFile bounds a login file read for an import.
const maxLoginFile = 1 << 20

// ImportLogin imports client's login (logins.Clients) from the file from,
// by default the CLI's file under the user's home, for the agent home
// cfg.Sandbox.Home of the canonical workspace ws. The config must have a
// [logins] entry of the client's built-in provider. A fresh home is
// refused: it is empty at every run.
func ImportLogin(ctx context.Context, cfg *config.Config, client, from, ws string) (LoginImport, error) {
	c, ok := logins.ClientNamed(client)
	if !ok {
		var names []string
		for _, c := range logins.Clients {
			names = append(names, c.Name)
		}
		return LoginImport{}, errclass.Wrap(errclass.Invalid, fmt.Errorf("cannot import a login of %q: one of %s", client, strings.Join(names, ", ")))
	}
	login, err := loginFor(cfg, c)
	if err != nil {
		return LoginImport{}, err
	}
	home := cfg.Sandbox.Home
	if home.Kind == agenthome.Fresh {
		return LoginImport{}, errclass.Wrap(errclass.Invalid, errors.New("the home is fresh (empty at every run): import into a kept one (--home workspace or --home profile:NAME)"))
	}
	data, from, err := hostLogin(ctx, c, from)
	if err != nil {
		return LoginImport{}, err
	}
	st, err := LoginStore()
	if err != nil {
		return LoginImport{}, err
	}
	out, toks, err := c.Import(login, data, func(field, real string) string { return st.Known(login, field, real) })
	if err != nil {
		return LoginImport{}, errclass.Wrap(errclass.Invalid, fmt.Errorf("%s: %w", from, err))
	}
	dir, err := agenthome.Ensure(home, ws)
	if err != nil {
		return LoginImport{}, err
	}
	// The tokens go into the store before the home gets their phantoms:
	// a phantom is never written without its token kept.
	if err := st.Add(toks...); err != nil {
		return LoginImport{}, err
	}
	// The home is written by sandboxed code: the file is written beneath
	// it without following any link an agent left there.
	root, err := fsguard.Open(dir, fsguard.Options{Writable: true})
	if err != nil {
		return LoginImport{}, err
	}
	defer root.Close()
	if err := root.Write(c.File, out); err != nil {
		return LoginImport{}, fmt.Errorf("writing the phantom login into the home %s: %w", dir, err)
	}
	res := LoginImport{Login: login, Tokens: len(toks), Store: st.Path(), HomeFile: filepath.Join(dir, c.File)}
	res.Reloaded = reloadOnDemand(ctx)
	return res, nil
}

// loginFor names the [logins] entry of c's provider in cfg.
func loginFor(cfg *config.Config, c logins.Client) (string, error) {
	if cfg.Egress != nil {
		for _, p := range cfg.Egress.Logins {
			if p.Builtin == c.Provider {
				return p.Name, nil
			}
		}
	}
	return "", errclass.Wrap(errclass.Config, fmt.Errorf("%s has no [logins] entry for %s's tokens: add\n\n[logins.%s]\nprovider = %q\n\n(the gateway only swaps the phantoms of a configured login)", TrustedFile(cfg), c.Name, c.Name, c.Provider))
}

// hostLogin reads c's login from the file from, by default the CLI's
// file under the user's home; where that file does not exist and the CLI
// keeps its login in the macOS Keychain instead (Claude Code), from the
// Keychain. It returns the data and where it came from.
func hostLogin(ctx context.Context, c logins.Client, from string) ([]byte, string, error) {
	if from != "" {
		data, err := readLoginFile(from)
		return data, from, err
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return nil, "", err
	}
	from = filepath.Join(h, c.File)
	data, err := readLoginFile(from)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || c.Keychain == "" {
		return data, from, err
	}
	data, kerr := keychainLogin(ctx, c.Keychain)
	if errors.Is(kerr, errors.ErrUnsupported) {
		return nil, "", err
	}
	if kerr != nil {
		return nil, "", errclass.Wrap(errclass.Invalid, fmt.Errorf("no %s and %w (or point --from at a login file)", from, kerr))
	}
	return data, "the Keychain item " + strconv.Quote(c.Keychain), nil
}

func readLoginFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("reading the login: %w", err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxLoginFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxLoginFile {
		return nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("%s is larger than %d bytes: not a login file", path, maxLoginFile))
	}
	return data, nil
}

// reloadOnDemand asks a running on-demand gateway to reload, so it knows
// the imported tokens at once; it reports whether one did. A gateway that
// is not running reads the store when it starts.
func reloadOnDemand(ctx context.Context) bool {
	state, err := paths.StateDir()
	if err != nil {
		return false
	}
	sock := ondemand.Layout(state).Admin
	if _, err := os.Stat(sock); err != nil {
		return false
	}
	return admin.NewClient(sock).Reload(ctx) == nil
}

// LoginEntry is one login in the store, as `vak login ls` shows it: never
// a token.
type LoginEntry struct {
	Login string
	// Fields counts the tokens kept per field.
	Fields map[string]int
}

// ListLogins lists the logins of the store, by name.
func ListLogins() (string, []LoginEntry, error) {
	st, err := LoginStore()
	if err != nil {
		return "", nil, err
	}
	by := map[string]*LoginEntry{}
	for _, t := range st.Tokens() {
		e := by[t.Login]
		if e == nil {
			e = &LoginEntry{Login: t.Login, Fields: map[string]int{}}
			by[t.Login] = e
		}
		e.Fields[t.Field]++
	}
	var out []LoginEntry
	for _, n := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[n])
	}
	return st.Path(), out, nil
}

// RemoveLogin drops every token of login from the store and reloads a
// running on-demand gateway: the sandbox's phantoms of it stop working.
func RemoveLogin(ctx context.Context, login string) (int, error) {
	st, err := LoginStore()
	if err != nil {
		return 0, err
	}
	n, err := st.Remove(login)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errclass.Wrap(errclass.Invalid, fmt.Errorf("no login %q in %s (vak login ls lists them)", login, st.Path()))
	}
	reloadOnDemand(ctx)
	return n, nil
}

// dockerGatewaysNote says when the gateways with stores of their own see a
// change of the login store.
const dockerGatewaysNote = "gateways of docker-backed runs, sessions and dev containers take the change when a vak command next starts or reuses them"

// LoginClients are the names `vak login import` takes.
func LoginClients() []string {
	var n []string
	for _, c := range logins.Clients {
		n = append(n, c.Name)
	}
	return n
}

// ImportLoginReport is ImportLogin, printing what it did to w.
func ImportLoginReport(ctx context.Context, w io.Writer, cfg *config.Config, client, from, ws string) error {
	res, err := ImportLogin(ctx, cfg, client, from, ws)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "imported %d token(s) of login %s into %s\nphantom login written to %s\n", res.Tokens, res.Login, res.Store, res.HomeFile)
	if res.Reloaded {
		fmt.Fprintln(w, "the running gateway reloaded")
	}
	fmt.Fprintln(w, dockerGatewaysNote)
	return nil
}

// ListLoginsReport prints the logins of the store to w: per login, how
// many tokens of each field it keeps, never a token.
func ListLoginsReport(w io.Writer) error {
	path, list, err := ListLogins()
	if err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Fprintf(w, "no login in %s\n", path)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOGIN\tTOKENS KEPT")
	for _, e := range list {
		var parts []string
		for _, f := range slices.Sorted(maps.Keys(e.Fields)) {
			parts = append(parts, fmt.Sprintf("%s %d", f, e.Fields[f]))
		}
		fmt.Fprintf(tw, "%s\t%s\n", e.Login, strings.Join(parts, ", "))
	}
	return tw.Flush()
}

// RemoveLoginReport is RemoveLogin, printing what it did to w.
func RemoveLoginReport(w io.Writer, login string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := RemoveLogin(ctx, login)
	if err == nil {
		fmt.Fprintf(w, "removed %d token(s) of login %s\n%s\n", n, login, dockerGatewaysNote)
	}
	return err
}
