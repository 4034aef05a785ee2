package proxynet

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"vak/internal/catrust"
	"vak/internal/egress/secrets"

	pkcs12 "software.sslmate.com/src/go-pkcs12"
)

// SystemRootFiles are where hosts keep their PEM root bundle; the first that
// exists is used for the combined bundle.
var SystemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/cert.pem",                  // macOS, BSD, Alpine
	"/etc/ssl/ca-bundle.pem",             // openSUSE
}

// SandboxEnv is the environment every proxied sandbox gets, on every
// backend: the trust variables for trust files seen in dir, and the secret
// placeholders (NAME=placeholder, sorted by name; never a real value).
func SandboxEnv(dir string, placeholders map[string]string) []string {
	env := catrust.Env(dir)
	for _, k := range slices.Sorted(maps.Keys(placeholders)) {
		env = append(env, k+"="+placeholders[k])
	}
	return env
}

// WriteTrust writes the trust files for caPEM into dir (created 0755; files
// 0644: they are public). systemRoots is a PEM bundle (may be empty).
//
// Every proxied create calls it: when dir already holds all the files
// written from the same caPEM and systemRoots (the digest of both, in
// trustStamp, written last), nothing is parsed, encoded or written again.
func WriteTrust(dir string, caPEM, systemRoots []byte) error {
	stamp := trustDigest(caPEM, systemRoots)
	if trustCurrent(dir, stamp) {
		return nil
	}
	if err := writeTrust(dir, caPEM, systemRoots); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, trustStamp), []byte(stamp+"\n"), 0o644)
}

// trustStamp, in a trust dir, is the digest of the inputs its files were
// written from (trustDigest).
const trustStamp = ".written-from"

func trustDigest(caPEM, systemRoots []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "vak trust v1\n%d\n", len(caPEM))
	h.Write(caPEM)
	h.Write(systemRoots)
	return hex.EncodeToString(h.Sum(nil))
}

// trustCurrent reports whether dir's files were written from the inputs
// whose digest is stamp and are all there (regular, not empty).
func trustCurrent(dir, stamp string) bool {
	got, err := os.ReadFile(filepath.Join(dir, trustStamp))
	if err != nil || strings.TrimSpace(string(got)) != stamp {
		return false
	}
	for _, name := range catrust.Files {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			return false
		}
	}
	return true
}

func writeTrust(dir string, caPEM, systemRoots []byte) error {
	ca, err := parseCerts(caPEM)
	if err != nil || len(ca) != 1 {
		return fmt.Errorf("proxynet: CA certificate: want exactly one PEM certificate: %v", err)
	}
	if !ca[0].IsCA {
		return errors.New("proxynet: the gateway certificate is not a CA")
	}
	roots, _ := parseCerts(systemRoots) // unparsable entries are skipped
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var bundle bytes.Buffer
	bundle.Write(bytes.TrimSpace(systemRoots))
	if bundle.Len() > 0 {
		bundle.WriteString("\n")
	}
	pem.Encode(&bundle, &pem.Block{Type: "CERTIFICATE", Bytes: ca[0].Raw})
	store, err := pkcs12.Modern.EncodeTrustStore(append(roots, ca[0]), catrust.StorePass)
	if err != nil {
		return fmt.Errorf("proxynet: Java trust store: %w", err)
	}
	for name, data := range map[string][]byte{
		catrust.CAFile:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca[0].Raw}),
		catrust.BundleFile: bundle.Bytes(),
		catrust.StoreFile:  store,
	} {
		if err := writeFileAtomic(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// SystemRoots reads the first existing system root bundle.
func SystemRoots() []byte {
	for _, f := range SystemRootFiles {
		if data, err := os.ReadFile(f); err == nil {
			return data
		}
	}
	return nil
}

func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			continue
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no certificates")
	}
	return out, nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	// A temporary file of its own: concurrent writers of the same path
	// (two runs keeping one topology warm) must not rename each other's.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Placeholders returns the placeholders kept in file for names, creating
// (and saving, 0600) fresh ones for names that have none yet: the
// sandboxes' environment is written before their gateway starts (a dev
// container's template, a kubernetes session), and the gateway is seeded
// with the same ones.
func Placeholders(file string, names []string) (map[string]string, error) {
	m := map[string]string{}
	if data, err := os.ReadFile(file); err == nil {
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("proxynet: %s: %w", file, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("proxynet: %w", err)
	}
	changed := false
	out := map[string]string{}
	for _, n := range names {
		if !secrets.ValidName(n) {
			return nil, fmt.Errorf("proxynet: secret name %q is not an environment variable name", n)
		}
		if m[n] == "" {
			m[n] = secrets.NewPlaceholder()
			changed = true
		}
		out[n] = m[n]
	}
	if changed {
		data, _ := json.Marshal(m)
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return nil, fmt.Errorf("proxynet: %w", err)
		}
		if err := writeFileAtomic(file, data, 0o600); err != nil {
			return nil, fmt.Errorf("proxynet: %w", err)
		}
	}
	return out, nil
}
