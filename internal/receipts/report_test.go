package receipts

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// The reports of `vak receipts verify` and `vak receipts ls`: what they
// print and when they fail.
func TestReports(t *testing.T) {
	dir := t.TempDir()
	keyDir := filepath.Join(dir, "key")
	key, err := LoadOrCreateKey(keyDir)
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(keyDir, PubKeyFile)
	logs := filepath.Join(dir, "logs")
	signed, unsigned := filepath.Join(logs, "signed.jsonl"), filepath.Join(logs, "old.jsonl")
	l, err := OpenSigned(signed, key)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(Record{Protocol: "https", Host: "a.test", Decision: Allow})
	l.Close()
	if l, err = Open(unsigned); err != nil {
		t.Fatal(err)
	}
	l.Append(Record{Protocol: "dns", Rule: -1, Decision: Deny})
	l.Close()
	missing := filepath.Join(dir, "missing.pub")
	tests := []struct {
		name     string
		run      func(w *bytes.Buffer, note func(string)) error
		fails    bool
		want     string // in the output, or in the error when it fails
		wantNote bool
	}{
		{"verify signed", func(w *bytes.Buffer, n func(string)) error { return VerifyReport(w, signed, pub, false, n) }, false, "OK, 1 record(s)", false},
		{"verify unsigned", func(w *bytes.Buffer, n func(string)) error { return VerifyReport(w, unsigned, pub, false, n) }, true, "does not verify", false},
		{"verify unsigned allowed", func(w *bytes.Buffer, n func(string)) error { return VerifyReport(w, unsigned, pub, true, n) }, false, "signatures not checked", false},
		{"verify without a key", func(w *bytes.Buffer, n func(string)) error { return VerifyReport(w, signed, missing, false, n) }, true, "--allow-unsigned", false},
		{"verify chain only without a key", func(w *bytes.Buffer, n func(string)) error { return VerifyReport(w, unsigned, missing, true, n) }, false, "OK, 1 record(s)", true},
		{"ls signed", func(w *bytes.Buffer, _ func(string)) error { return ListReport(w, logs, pub, false) }, true, "1 of 2 receipts log(s) do not verify", false},
		{"ls chain only", func(w *bytes.Buffer, _ func(string)) error { return ListReport(w, logs, "", true) }, false, "OK (chain only)", false},
		{"ls without a key", func(w *bytes.Buffer, _ func(string)) error { return ListReport(w, logs, missing, false) }, true, "--chain-only", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			noted := false
			err := tc.run(&out, func(string) { noted = true })
			got := out.String()
			if err != nil {
				got = err.Error()
			}
			if (err != nil) != tc.fails || !strings.Contains(got, tc.want) || noted != tc.wantNote {
				t.Fatalf("err %v, noted %v, output:\n%s", err, noted, out.String())
			}
		})
	}
}
