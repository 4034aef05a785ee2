package taskenv

import (
	"fmt"

	"vak/internal/hostenv"
)

// CommandEnv resolves the variables a caller sets for one session command
// (`vak session exec -e`): NAME=VALUE sets a value; NAME alone copies the
// variable from this process (lookup), but only when allow names it, since
// copying a host variable is how secrets leak. allow nil means
// hostenv.Allowlist(); a name that is not set here is skipped.
func CommandEnv(entries, allow []string, lookup func(string) (string, bool)) (map[string]string, error) {
	if allow == nil {
		allow = hostenv.Allowlist()
	}
	env := map[string]string{}
	for _, e := range entries {
		k, v, ok := cutEnv(e)
		if !ok {
			if !contains(allow, k) {
				return nil, fmt.Errorf("-e %s: %w (give a value: -e %s=VALUE)", k, ErrEnvNotAllowed, k)
			}
			if v, ok = lookup(k); !ok {
				continue
			}
		}
		env[k] = v
	}
	return env, nil
}

func cutEnv(e string) (k, v string, ok bool) {
	for i := 0; i < len(e); i++ {
		if e[i] == '=' {
			return e[:i], e[i+1:], true
		}
	}
	return e, "", false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
