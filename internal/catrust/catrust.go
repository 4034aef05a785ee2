// Package catrust names the gateway CA's public trust files and the
// environment variables that point common runtimes at them: one spelling
// for every place that writes the files (proxynet.WriteTrust) or points a
// sandbox at them (the docker topology, the native fence, seatbelt's
// proxy, the dev-container template).
package catrust

import "path"

// Dir is where sandboxed containers see the trust files (mounted
// read-only). It holds only public certificates.
const Dir = "/etc/vak/trust"

// The files of a trust directory.
const (
	CAFile     = "vak-ca.pem"       // the gateway CA certificate alone
	BundleFile = "ca-bundle.pem"    // system roots + the vak CA
	StoreFile  = "truststore.p12"   // Java: PKCS#12 trust store with the same roots
	StorePass  = "vak-public-trust" // not a secret: the store holds public certificates only
)

// Files are the names of every file a trust directory holds.
var Files = []string{CAFile, BundleFile, StoreFile}

// Env returns the environment variables common runtimes read to find
// extra or replacement CA roots (OpenSSL, Go, Node, Python requests, curl,
// git, pip, the AWS CLI, Java), pointing at the trust files that the sandbox sees in
// dir.
func Env(dir string) []string {
	bundle := path.Join(dir, BundleFile)
	return []string{
		"SSL_CERT_FILE=" + bundle,
		"NODE_EXTRA_CA_CERTS=" + path.Join(dir, CAFile),
		"REQUESTS_CA_BUNDLE=" + bundle,
		"CURL_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle,
		"PIP_CERT=" + bundle,
		// The AWS CLI and botocore read their own variable only.
		"AWS_CA_BUNDLE=" + bundle,
		"JAVA_TOOL_OPTIONS=-Djavax.net.ssl.trustStore=" + path.Join(dir, StoreFile) +
			" -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=" + StorePass,
	}
}
