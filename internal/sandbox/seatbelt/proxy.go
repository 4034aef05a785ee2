package seatbelt

import (
	"strconv"

	"vak/internal/catrust"
)

// Env returns the environment that points commands at the gateway: the
// proxy variables in both spellings (curl reads only the lower-case
// http_proxy), an empty NO_PROXY (so nothing bypasses the proxy; what
// would is refused by the profile anyway), and the variables common
// runtimes read to trust the gateway's CA, the same ones the docker
// backend's proxied network sets.
func (x Proxy) Env() []string {
	u := "http://127.0.0.1:" + strconv.Itoa(x.Port)
	env := []string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		env = append(env, k+"="+u)
	}
	env = append(env, "NO_PROXY=", "no_proxy=")
	return append(env, catrust.Env(x.TrustDir)...)
}
