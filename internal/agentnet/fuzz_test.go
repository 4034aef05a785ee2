package agentnet

import (
	"strings"
	"testing"
)

// FuzzParseToken: no input panics the token parser, and nothing but a
// token signed with the key verifies.
func FuzzParseToken(f *testing.F) {
	key := []byte(strings.Repeat("k", 32))
	good := sign(key, claims{Task: "task-1", Identity: "ws-1", Audience: DefaultAudience, Expiry: 1})
	f.Add(good)
	f.Add(tokenPrefix + "e30.")
	f.Add("")
	f.Add(good + "x")
	f.Fuzz(func(t *testing.T, tok string) {
		if _, err := parse(key, tok); err == nil && !strings.HasPrefix(tok, good[:strings.LastIndexByte(good, '.')]) {
			t.Fatalf("%q verified without being signed", tok)
		}
		if _, err := parse([]byte(strings.Repeat("z", 32)), tok); err == nil {
			t.Fatalf("%q verified under another key", tok)
		}
	})
}
