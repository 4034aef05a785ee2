package seatbelt

import (
	"path"
	"strconv"
)

// The gateway's public trust files in Proxy.TrustDir (the names
// proxynet.WriteTrust writes).
const (
	TrustCAFile     = "vak-ca.pem"
	TrustBundleFile = "ca-bundle.pem"
	TrustStoreFile  = "truststore.p12"
	trustStorePass  = "vak-public-trust" // not a secret: the store holds public certificates only
)

// Env returns the environment that points commands at the gateway: the
// proxy variables in both spellings (curl reads only the lower-case
// http_proxy), an empty NO_PROXY (so nothing bypasses the proxy; what
// would is refused by the profile anyway), and the variables common
// runtimes read to trust the gateway's CA, the same ones the docker
// backend's proxied network sets.
func (x Proxy) Env() []string {
	u := "http://127.0.0.1:" + strconv.Itoa(x.Port)
	bundle := path.Join(x.TrustDir, TrustBundleFile)
	env := []string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		env = append(env, k+"="+u)
	}
	return append(env,
		"NO_PROXY=", "no_proxy=",
		"SSL_CERT_FILE="+bundle,
		"NODE_EXTRA_CA_CERTS="+path.Join(x.TrustDir, TrustCAFile),
		"REQUESTS_CA_BUNDLE="+bundle,
		"CURL_CA_BUNDLE="+bundle,
		"GIT_SSL_CAINFO="+bundle,
		"PIP_CERT="+bundle,
		"JAVA_TOOL_OPTIONS=-Djavax.net.ssl.trustStore="+path.Join(x.TrustDir, TrustStoreFile)+
			" -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword="+trustStorePass,
	)
}
