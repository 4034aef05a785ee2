package egressconfig

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"vak/internal/egress/logins"
	"vak/internal/egress/policy"
)

// Login is [logins.NAME]: a built-in provider, or the token URLs and API
// hosts of another one.
//
//	[logins.claude]
//	provider = "anthropic"          # built-in: anthropic, github, openai
//
//	[logins.corp]
//	token_urls = ["https://sso.corp.example/oauth2/token"]
//	api_hosts = ["api.corp.example"]
type Login struct {
	Provider  *string  `toml:"provider"`
	TokenURLs []string `toml:"token_urls"`
	APIHosts  []string `toml:"api_hosts"`
}

var loginNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`) })

// validateLogins checks every [logins.NAME], in name order.
func validateLogins(file string, in map[string]*Login) ([]logins.Provider, error) {
	var out []logins.Provider
	for _, name := range sortedKeys(in) {
		p, err := validateLogin(file, name, in[name])
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func validateLogin(file, name string, l *Login) (logins.Provider, error) {
	field := "logins." + name
	if !loginNameRE().MatchString(name) {
		return logins.Provider{}, fieldError(file, field, "login names are 1 to 32 of a-z, 0-9, '-' and '_', starting with a letter or digit")
	}
	if l == nil {
		return logins.Provider{}, fieldError(file, field, "empty")
	}
	p := logins.Provider{Name: name}
	if l.Provider != nil {
		if len(l.TokenURLs)+len(l.APIHosts) > 0 {
			return logins.Provider{}, fieldError(file, field, "set either provider or token_urls and api_hosts, not both")
		}
		b, ok := logins.Builtins[*l.Provider]
		if !ok {
			return logins.Provider{}, fieldError(file, field+".provider", "%q is not a built-in provider (one of %s; or set token_urls and api_hosts instead)", *l.Provider, strings.Join(logins.BuiltinNames(), ", "))
		}
		p.Builtin, p.Endpoints = *l.Provider, b.Endpoints
		for _, h := range b.APIHosts {
			p.APIHosts = append(p.APIHosts, policy.MustHostPattern(h))
		}
		return p, nil
	}
	if len(l.TokenURLs) == 0 || len(l.APIHosts) == 0 {
		return logins.Provider{}, fieldError(file, field, "set provider (one of %s), or both token_urls and api_hosts", strings.Join(logins.BuiltinNames(), ", "))
	}
	for i, u := range l.TokenURLs {
		e, err := logins.ParseEndpoint(u)
		if err != nil {
			return logins.Provider{}, fieldError(file, fmt.Sprintf("%s.token_urls[%d]", field, i), "%v", err)
		}
		p.Endpoints = append(p.Endpoints, e)
	}
	for i, h := range l.APIHosts {
		hp, err := policy.ParseHostPattern(h)
		if err != nil {
			return logins.Provider{}, fieldError(file, fmt.Sprintf("%s.api_hosts[%d]", field, i), "%v", err)
		}
		if hp.IsAny() {
			return logins.Provider{}, fieldError(file, fmt.Sprintf("%s.api_hosts[%d]", field, i), "\"*\" would send the tokens anywhere")
		}
		p.APIHosts = append(p.APIHosts, hp)
	}
	return p, nil
}
