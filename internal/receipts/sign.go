package receipts

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SigSuffix is appended to the log path to name the signature file: one
// Checkpoint per line, appended after every batch of records.
const SigSuffix = ".sig"

// Key file names inside the key directory.
const (
	KeyFile    = "receipts.key"
	PubKeyFile = "receipts.pub"
)

// Checkpoint is one line of the signature file: an Ed25519 signature over
// the hash of record Seq (the Records-th record). Since every record carries
// the hash of the one before, a checkpoint authenticates the whole log up to
// that record.
type Checkpoint struct {
	Seq     uint64 `json:"seq"`
	Records uint64 `json:"records"`
	Hash    string `json:"hash"`
	// Key is the fingerprint (KeyID) of the public key that verifies Sig.
	Key string `json:"key"`
	Sig string `json:"sig"`
}

// checkpointMsg is what a checkpoint (and a signed head) signs.
func checkpointMsg(seq, records uint64, hash string) []byte {
	return fmt.Appendf(nil, "vak-receipts-checkpoint-v1 seq=%d records=%d hash=%s", seq, records, hash)
}

// KeyID is the fingerprint of a public key: hex SHA-256 of its bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

func sign(key ed25519.PrivateKey, seq, records uint64, hash string) (keyID, sig string) {
	s := ed25519.Sign(key, checkpointMsg(seq, records, hash))
	return KeyID(key.Public().(ed25519.PublicKey)), base64.StdEncoding.EncodeToString(s)
}

// verifySig checks a checkpoint-style signature.
func verifySig(pub ed25519.PublicKey, seq, records uint64, hash, keyID, sig string) error {
	if keyID != KeyID(pub) {
		return fmt.Errorf("signed with another key (%.16s, expected %.16s)", keyID, KeyID(pub))
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !ed25519.Verify(pub, checkpointMsg(seq, records, hash), raw) {
		return errors.New("signature does not verify: forged or altered")
	}
	return nil
}

// LoadOrCreateKey returns the receipts signing key kept in dir (created
// mode 0700 with a new key, mode 0600, on first use). A key file that group
// or others can read is refused. dir belongs in the gateway's state
// directory, which is never mounted into a sandbox.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	keyPath := filepath.Join(dir, KeyFile)
	b, err := os.ReadFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("receipts: signing key %s has mode %v: others can read it (chmod 600)", keyPath, fi.Mode().Perm())
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("receipts: signing key %s: not a PEM private key", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("receipts: signing key %s: %w", keyPath, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("receipts: signing key %s: not an Ed25519 key", keyPath)
	}
	return ek, nil
}

func createKey(dir string) (ed25519.PrivateKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	pder, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	// The public key first: a crash between the two leaves no private key
	// without its public half.
	if err := os.WriteFile(filepath.Join(dir, PubKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), 0o644); err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, KeyFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	if _, err := f.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		f.Close()
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("receipts: signing key: %w", err)
	}
	return priv, nil
}

// LoadPublicKey reads a PEM public key written by LoadOrCreateKey (the
// receipts.pub file, or a copy of it kept elsewhere).
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("receipts: public key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("receipts: public key %s: not a PEM public key", path)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("receipts: public key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("receipts: public key %s: not an Ed25519 key", path)
	}
	return ek, nil
}

// readCheckpoints parses the signature file, verifying each signature;
// problems name the signature file's lines.
func readCheckpoints(path string, pub ed25519.PublicKey) ([]Checkpoint, []Problem, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var cps []Checkpoint
	var probs []Problem
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), maxLine)
	line := 0
	var last uint64
	for sc.Scan() {
		line++
		var cp Checkpoint
		dec := json.NewDecoder(bytesReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cp); err != nil {
			probs = append(probs, Problem{File: SigSuffix, Line: line, Reason: "not a checkpoint: " + err.Error()})
			continue
		}
		if err := verifySig(pub, cp.Seq, cp.Records, cp.Hash, cp.Key, cp.Sig); err != nil {
			probs = append(probs, Problem{File: SigSuffix, Line: line, Reason: fmt.Sprintf("checkpoint for record %d: %v", cp.Seq, err)})
			continue
		}
		if cp.Records == 0 || cp.Seq != cp.Records-1 || cp.Records <= last {
			probs = append(probs, Problem{File: SigSuffix, Line: line, Reason: fmt.Sprintf("checkpoint for record %d (%d records) is out of order", cp.Seq, cp.Records)})
			continue
		}
		last = cp.Records
		cps = append(cps, cp)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("receipts: read %s: %w", path, err)
	}
	return cps, probs, nil
}
