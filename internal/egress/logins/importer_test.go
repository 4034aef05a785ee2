package logins

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestImportClients(t *testing.T) {
	at, rt := "sk-ant-oat01-"+strings.Repeat("a", 40), "sk-ant-ort01-"+strings.Repeat("r", 40)
	id := jwt(`{"email":"dev@example.com"}`)
	gho := "gho_" + strings.Repeat("g", 36)
	for _, tc := range []struct {
		client, file string
		want         int
		check        func(t *testing.T, out []byte, toks []Token)
	}{
		{"claude", `{"claudeAiOauth":{"accessToken":"` + at + `","refreshToken":"` + rt + `","expiresAt":1,"scopes":["user:inference"],"subscriptionType":"max"},"other":1}`, 2, func(t *testing.T, out []byte, toks []Token) {
			var m struct {
				O struct {
					AccessToken, RefreshToken, SubscriptionType string
					ExpiresAt                                   int
				} `json:"claudeAiOauth"`
				Other int `json:"other"`
			}
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(m.O.AccessToken, "sk-ant-oat01-") || m.O.AccessToken == at || m.O.SubscriptionType != "max" || m.O.ExpiresAt != 1 || m.Other != 1 {
				t.Errorf("%s", out)
			}
		}},
		{"codex", `{"OPENAI_API_KEY":null,"tokens":{"id_token":"` + id + `","access_token":"` + id + `x","refresh_token":"rt_` + strings.Repeat("z", 30) + `","account_id":"acc-1"},"last_refresh":"2026-01-01T00:00:00Z"}`, 3, func(t *testing.T, out []byte, toks []Token) {
			if !strings.Contains(string(out), `"account_id": "acc-1"`) || !strings.Contains(string(out), "last_refresh") {
				t.Errorf("%s", out)
			}
		}},
		{"gh", "github.com:\n    users:\n        dev:\n            oauth_token: " + gho + "\n    git_protocol: https\n    oauth_token: " + gho + "\n    user: dev\n", 1, func(t *testing.T, out []byte, toks []Token) {
			if strings.Count(string(out), toks[0].Phantom) != 2 || !strings.Contains(string(out), "git_protocol: https") {
				t.Errorf("%s", out)
			}
		}},
	} {
		t.Run(tc.client, func(t *testing.T) {
			c, ok := ClientNamed(tc.client)
			if !ok {
				t.Fatal("no client")
			}
			out, toks, err := c.Import(tc.client, []byte(tc.file), nil)
			if err != nil || len(toks) != tc.want {
				t.Fatalf("%d tokens, %v", len(toks), err)
			}
			for _, tk := range toks {
				if strings.Contains(string(out), tk.Real) || !strings.Contains(string(out), tk.Phantom) {
					t.Errorf("%s: the real value is left or the phantom missing", tk.Field)
				}
			}
			tc.check(t, out, toks)
		})
	}
	c, _ := ClientNamed("claude")
	for _, bad := range []string{`{}`, `{"claudeAiOauth":null}`, `{"claudeAiOauth":{"accessToken":""}}`} {
		if _, _, err := c.Import("claude", []byte(bad), nil); !errors.Is(err, ErrNoLogin) {
			t.Errorf("%s: %v, want ErrNoLogin", bad, err)
		}
	}
	if _, _, err := c.Import("claude", []byte("not json"), nil); err == nil {
		t.Error("a file that is not JSON was imported")
	}
}
