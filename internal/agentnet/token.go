package agentnet

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// claims are a task token's signed content.
type claims struct {
	// Task is the task id (random, not secret: it appears in receipts).
	Task string `json:"task"`
	// Identity is the workspace identity the task acts for.
	Identity string `json:"id"`
	// Audience is the broker audience the token is valid for.
	Audience string `json:"aud"`
	// Expiry is the Unix time after which the token is refused.
	Expiry int64 `json:"exp"`
}

const tokenPrefix = "vakan1."

// sign returns the token for c under key.
func sign(key []byte, c claims) string {
	body, _ := json.Marshal(c)
	p := base64.RawURLEncoding.EncodeToString(body)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(tokenPrefix + p))
	return tokenPrefix + p + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// parse checks a token's signature and returns its claims; expiry, audience
// and revocation are the broker's checks.
func parse(key []byte, tok string) (claims, error) {
	var c claims
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return c, fmt.Errorf("%w: malformed token", ErrToken)
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return c, fmt.Errorf("%w: malformed token", ErrToken)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return c, fmt.Errorf("%w: malformed token", ErrToken)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(tokenPrefix + p))
	if !hmac.Equal(got, m.Sum(nil)) {
		return c, fmt.Errorf("%w: bad signature", ErrToken)
	}
	body, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return c, fmt.Errorf("%w: malformed token", ErrToken)
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return c, fmt.Errorf("%w: malformed token", ErrToken)
	}
	return c, nil
}

// randomID returns n random bytes in hex.
func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b)
}

// loadOrCreateKey reads the token HMAC key from dir, creating it (0600)
// on first use.
func loadOrCreateKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, "token.key")
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("agentnet: %s: want a 32-byte key, have %d bytes", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agentnet: read token key: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("agentnet: token key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agentnet: create token key: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("agentnet: write token key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("agentnet: write token key: %w", err)
	}
	return b, nil
}
