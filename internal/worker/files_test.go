package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/worker/wire"
)

// TestJSONTextLen checks jsonTextLen against wire.Marshal, and that read
// answers text as text and control characters as base64 (the shorter).
func TestJSONTextLen(t *testing.T) {
	for _, s := range []string{"", "plain text\n", "\"quoted\" \\ back\tslash\r\n", "\x00\x01\x1b\x1f\b\f\x7f", "<a href=\"x&y\">", "line\u2028para\u2029", "ünïcødé ✓ 𝄞", strings.Repeat("\x01", 99)} {
		data, err := wire.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := jsonTextLen([]byte(s)), len(data)-2; got != want {
			t.Errorf("jsonTextLen(%q) = %d, want %d (%s)", s, got, want, data)
		}
	}
	c := newConn(t, nil)
	for i, tc := range []struct{ content, encoding string }{
		{"func main() {\n\tprintln(\"<hi>\")\n}\n", wire.EncodingUTF8},
		{strings.Repeat("\x01\x02\x1b", 100), wire.EncodingBase64},
		{"\xff\xfe not UTF-8", wire.EncodingBase64},
	} {
		if err := os.WriteFile(filepath.Join(c.ws, "r"), []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		c.send(fmt.Sprintf(`{"id":"r%d","op":"read","args":{"path":"r"}}`, i))
		var res wire.ReadResult
		if r := c.response(); !r.OK || json.Unmarshal(r.Result, &res) != nil || res.Encoding != tc.encoding {
			t.Errorf("read of %q: %+v (%s), want encoding %q", tc.content, r, r.Result, tc.encoding)
		}
	}
}
