package receipts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func writeLog(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "receipts.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.Append(Record{Protocol: "https", Host: fmt.Sprintf("h%d.example.com", i), Port: 443, Method: "GET", Path: "/", Rule: 0, Decision: Allow, Status: 200, BytesIn: int64(i)})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
}

func writeLines(t *testing.T, path string, ls []string) {
	t.Helper()
	s := strings.Join(ls, "")
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyIntact(t *testing.T) {
	t.Parallel()
	path := writeLog(t, 50)
	rep, err := VerifyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 50 || !rep.HeadChecked {
		t.Fatalf("report %+v", rep)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v, want 0600", fi.Mode().Perm())
	}
	// Reopen and continue the chain.
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Record{Protocol: "dns", Host: "x.example.com", Rule: -1, Decision: Deny}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err = VerifyFile(path)
	if err != nil || rep.Records != 51 {
		t.Fatalf("after reopen: %+v %v", rep, err)
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	t.Parallel()
	tamper := map[string]func([]string) []string{
		"edit middle": func(ls []string) []string {
			ls[10] = strings.Replace(ls[10], `"decision":"allow"`, `"decision":"deny"`, 1)
			return ls
		},
		"edit bytes field": func(ls []string) []string {
			ls[3] = strings.Replace(ls[3], `"bytes_out":0`, `"bytes_out":1`, 1)
			return ls
		},
		"delete middle": func(ls []string) []string { return append(ls[:5:5], ls[6:]...) },
		"delete first":  func(ls []string) []string { return ls[1:] },
		"delete last":   func(ls []string) []string { return ls[:len(ls)-1] },
		"swap":          func(ls []string) []string { ls[7], ls[8] = ls[8], ls[7]; return ls },
		"duplicate":     func(ls []string) []string { return append(ls[:9:9], ls[8:]...) },
		"edit last": func(ls []string) []string {
			n := len(ls) - 1
			ls[n] = strings.Replace(ls[n], `"GET"`, `"PUT"`, 1)
			return ls
		},
		"garbage line": func(ls []string) []string { return append(ls[:4:4], append([]string{"{}\n"}, ls[4:]...)...) },
		"reorder all": func(ls []string) []string {
			for i, j := 0, len(ls)-1; i < j; i, j = i+1, j-1 {
				ls[i], ls[j] = ls[j], ls[i]
			}
			return ls
		},
	}
	for name, fn := range tamper {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := writeLog(t, 20)
			ls := lines(t, path)
			if len(ls) != 20 {
				t.Fatalf("got %d lines", len(ls))
			}
			writeLines(t, path, fn(ls))
			rep, err := VerifyFile(path)
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("tampering not detected: %+v, %v", rep, err)
			}
		})
	}
}

func TestOpenRefusesDamagedTail(t *testing.T) {
	t.Parallel()
	path := writeLog(t, 3)
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, b[:len(b)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil {
		t.Fatal("Open accepted a log with an incomplete last record")
	}
	if _, err := VerifyFile(path); !errors.Is(err, ErrTampered) {
		t.Fatalf("VerifyFile = %v, want ErrTampered", err)
	}
}

func TestVerifyStream(t *testing.T) {
	t.Parallel()
	rep, err := Verify(bytes.NewReader(nil))
	if err != nil || !rep.OK() || rep.Records != 0 {
		t.Fatalf("empty log: %+v %v", rep, err)
	}
}

// TestHeadBehindIsACheckpoint: a head written before the last records (a
// crash between head updates) still verifies, and counts the newer records.
func TestHeadBehindIsACheckpoint(t *testing.T) {
	t.Parallel()
	path := writeLog(t, 5)
	oldHead, err := os.ReadFile(path + HeadSuffix)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l.Append(Record{Protocol: "dns", Rule: -1, Decision: Deny})
	}
	l.Close()
	os.WriteFile(path+HeadSuffix, oldHead, 0o600)
	rep, err := VerifyFile(path)
	if err != nil || rep.Records != 8 || rep.AfterHead != 3 {
		t.Fatalf("%+v %v", rep, err)
	}
	// But a head that names a record the log no longer has fails.
	ls := lines(t, path)
	writeLines(t, path, ls[:4])
	if _, err := VerifyFile(path); !errors.Is(err, ErrTampered) {
		t.Fatalf("truncation below the head: %v", err)
	}
}

// TestAppendRacesClose: appends racing with Close either land or get
// ErrClosed; none panics, and the log verifies.
func TestAppendRacesClose(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if err := l.Append(Record{Protocol: "dns", Rule: -1, Decision: Deny}); err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Error(err)
					}
					return
				}
			}
		}()
	}
	l.Close()
	wg.Wait()
	if _, err := VerifyFile(path); err != nil {
		t.Fatal(err)
	}
}
