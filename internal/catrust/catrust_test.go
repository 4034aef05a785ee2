package catrust

import (
	"slices"
	"strings"
	"testing"
)

// Every variable points into the directory given, at the file its runtime
// reads, and nothing names a file a trust directory does not hold.
func TestEnv(t *testing.T) {
	for _, dir := range []string{Dir, "/run/vak/trust", "/Users/a b/trust"} {
		env := Env(dir)
		got := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		for _, tc := range []struct{ name, want string }{
			{"SSL_CERT_FILE", dir + "/" + BundleFile},
			{"NODE_EXTRA_CA_CERTS", dir + "/" + CAFile},
			{"REQUESTS_CA_BUNDLE", dir + "/" + BundleFile},
			{"CURL_CA_BUNDLE", dir + "/" + BundleFile},
			{"GIT_SSL_CAINFO", dir + "/" + BundleFile},
			{"PIP_CERT", dir + "/" + BundleFile},
			{"AWS_CA_BUNDLE", dir + "/" + BundleFile},
			{"JAVA_TOOL_OPTIONS", "-Djavax.net.ssl.trustStore=" + dir + "/" + StoreFile + " -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=" + StorePass},
		} {
			if got[tc.name] != tc.want {
				t.Errorf("%s: %s=%q, want %q", dir, tc.name, got[tc.name], tc.want)
			}
		}
		if len(got) != 8 || len(env) != 8 {
			t.Errorf("%s: %d variables, want 8: %q", dir, len(env), env)
		}
	}
	if !slices.Equal(Files, []string{CAFile, BundleFile, StoreFile}) {
		t.Errorf("Files = %q", Files)
	}
}
