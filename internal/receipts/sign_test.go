package receipts

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeSigned writes n records in batches (Sync between them, so several
// checkpoints exist) to a signed log.
func writeSigned(t *testing.T, key ed25519.PrivateKey, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "signed.jsonl")
	l, err := OpenSigned(path, key)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := l.Append(Record{Protocol: "https", Host: fmt.Sprintf("h%d.test", i), Rule: 0, Decision: Allow, Status: 200}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			l.Sync()
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func testKey(t *testing.T) (ed25519.PrivateKey, ed25519.PublicKey) {
	t.Helper()
	k, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	return k, k.Public().(ed25519.PublicKey)
}

// forgeAppend appends a record that continues the chain correctly, as an
// attacker with write access to the log (but not the key) can.
func forgeAppend(t *testing.T, path string, ls []string) []string {
	t.Helper()
	ls[len(ls)-1] = strings.TrimSuffix(ls[len(ls)-1], "\n") + "\n"
	last := strings.TrimSuffix(ls[len(ls)-1], "\n")
	var r Record
	if err := json.Unmarshal([]byte(last), &r); err != nil {
		t.Fatal(err)
	}
	f := Record{Seq: r.Seq + 1, Protocol: "https", Host: "forged.test", Rule: 0, Decision: Allow, Prev: hashLine([]byte(last))}
	b, _ := json.Marshal(f)
	return append(ls, string(b)+"\n")
}

// rechain recomputes every prev and seq after an edit, as an attacker who
// rewrites the whole log does.
func rechain(t *testing.T, ls []string) []string {
	t.Helper()
	prev := ZeroHash
	var out []string
	for i, l := range ls {
		var r Record
		if err := json.Unmarshal([]byte(strings.TrimSuffix(l, "\n")), &r); err != nil {
			t.Fatal(err)
		}
		r.Seq, r.Prev = uint64(i), prev
		b, _ := json.Marshal(r)
		prev = hashLine(b)
		out = append(out, string(b)+"\n")
	}
	return out
}

func TestSignedLogVerifies(t *testing.T) {
	t.Parallel()
	key, pub := testKey(t)
	path := writeSigned(t, key, 10)
	rep, err := VerifyFileSigned(path, pub, false)
	if err != nil || !rep.Signed || rep.Records != 10 || rep.Checkpoints < 3 {
		t.Fatalf("intact signed log: %+v %v", rep, err)
	}
	if fi, err := os.Stat(path + SigSuffix); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signature file: %v %v", fi, err)
	}
	var h Head
	b, _ := os.ReadFile(path + HeadSuffix)
	if json.Unmarshal(b, &h) != nil || h.Sig == "" {
		t.Fatalf("head not signed: %s", b)
	}
}

// TestSignedLogAttacks: what an attacker with write access to the log, its
// head and its signature file (but not the key) tries.
func TestSignedLogAttacks(t *testing.T) {
	t.Parallel()
	key, pub := testKey(t)
	_, otherPub := testKey(t)
	type attack struct {
		name     string
		do       func(t *testing.T, path string)
		wantLine int // first bad log line; 0: any problem
	}
	attacks := []attack{
		{"append a forged record with a correct prev", func(t *testing.T, path string) {
			writeLines(t, path, forgeAppend(t, path, lines(t, path)))
		}, 11},
		{"append a forged record and delete the head", func(t *testing.T, path string) {
			writeLines(t, path, forgeAppend(t, path, lines(t, path)))
			os.Remove(path + HeadSuffix)
		}, 11},
		{"delete the head and the last record", func(t *testing.T, path string) {
			os.Remove(path + HeadSuffix)
			ls := lines(t, path)
			writeLines(t, path, ls[:len(ls)-1])
		}, 0},
		{"edit a record and re-chain everything after it", func(t *testing.T, path string) {
			ls := lines(t, path)
			ls[4] = strings.Replace(ls[4], `"decision":"allow"`, `"decision":"deny"`, 1)
			writeLines(t, path, rechain(t, ls))
			os.Remove(path + HeadSuffix)
		}, 6}, // the first checkpoint after the edit (records are signed in batches of 3 here)
		{"delete the signature file", func(t *testing.T, path string) {
			os.Remove(path + SigSuffix)
		}, 0},
		{"forge a checkpoint for an appended record", func(t *testing.T, path string) {
			ls := forgeAppend(t, path, lines(t, path))
			writeLines(t, path, ls)
			os.Remove(path + HeadSuffix)
			last := strings.TrimSuffix(ls[len(ls)-1], "\n")
			_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
			cp := Checkpoint{Seq: 10, Records: 11, Hash: hashLine([]byte(last))}
			cp.Key, cp.Sig = sign(otherKey, cp.Seq, cp.Records, cp.Hash)
			cp.Key = KeyID(pub) // claims the right key
			b, _ := json.Marshal(cp)
			f, _ := os.OpenFile(path+SigSuffix, os.O_APPEND|os.O_WRONLY, 0)
			f.Write(append(b, '\n'))
			f.Close()
		}, 11},
		{"tamper with the head's signature", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path + HeadSuffix)
			var h Head
			json.Unmarshal(b, &h)
			h.Sig = strings.Repeat("A", len(h.Sig)-2) + "=="
			b, _ = json.Marshal(h)
			os.WriteFile(path+HeadSuffix, b, 0o600)
		}, 0},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			path := writeSigned(t, key, 10)
			// Control: the untouched log verifies, and the chain-only check
			// cannot see some of these attacks.
			if _, err := VerifyFileSigned(path, pub, false); err != nil {
				t.Fatalf("control: %v", err)
			}
			a.do(t, path)
			rep, err := VerifyFileSigned(path, pub, false)
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("attack verified: %+v %v", rep, err)
			}
			if a.wantLine != 0 && (rep.Problems[0].File != "" || rep.Problems[0].Line != a.wantLine) {
				t.Fatalf("first problem %+v, want log line %d (all: %+v)", rep.Problems[0], a.wantLine, rep.Problems)
			}
		})
	}
	// The wrong public key fails an intact log.
	path := writeSigned(t, key, 4)
	if _, err := VerifyFileSigned(path, otherPub, false); !errors.Is(err, ErrTampered) {
		t.Fatalf("another key: %v", err)
	}
}

// TestSigningContinuesUnsignedLog is the migration path: a log written
// before signing verifies with allowUnsigned only, and once a signing
// gateway continues it, the first checkpoint covers the old records.
func TestSigningContinuesUnsignedLog(t *testing.T) {
	t.Parallel()
	key, pub := testKey(t)
	path := writeLog(t, 5)
	if _, err := VerifyFileSigned(path, pub, false); !errors.Is(err, ErrTampered) {
		t.Fatalf("unsigned log verified as signed: %v", err)
	}
	if rep, err := VerifyFileSigned(path, pub, true); err != nil || rep.Signed {
		t.Fatalf("unsigned log with allowUnsigned: %+v %v", rep, err)
	}
	l, err := OpenSigned(path, key)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(Record{Protocol: "dns", Rule: -1, Decision: Deny})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := VerifyFileSigned(path, pub, false); err != nil || rep.Records != 6 || !rep.Signed {
		t.Fatalf("continued log: %+v %v", rep, err)
	}
}

func TestSigningKeyFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "key")
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("key not reloaded: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi, err)
	}
	pub, err := LoadPublicKey(filepath.Join(dir, PubKeyFile))
	if err != nil || !pub.Equal(k1.Public()) {
		t.Fatalf("public key: %v", err)
	}
	os.Chmod(filepath.Join(dir, KeyFile), 0o644)
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "others can read it") {
		t.Fatalf("readable key accepted: %v", err)
	}
}

// TestSyncWaitsForCheckpoint checks that checkpoints deferred by
// SignInterval are written before Sync returns: the open log verifies with
// every record signed after each Sync, however close together the appends.
func TestSyncWaitsForCheckpoint(t *testing.T) {
	t.Parallel()
	key, pub := testKey(t)
	path := filepath.Join(t.TempDir(), "sync.jsonl")
	l, err := OpenSigned(path, key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 20 {
		if err := l.Append(Record{Protocol: "https", Host: fmt.Sprintf("h%d.test", i), Rule: 0, Decision: Allow}); err != nil {
			t.Fatal(err)
		}
		if i%4 != 3 {
			continue
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		rep, err := VerifyFileSigned(path, pub, false)
		if err != nil || rep.Records != uint64(i+1) || !rep.Signed {
			t.Fatalf("after %d records and Sync: %+v %v", i+1, rep, err)
		}
	}
}

// TestConcurrentAppendsSigned: many goroutines appending at once (one of
// them writes, the others queue for it) give one unbroken, fully signed
// chain, and the checkpoint and head timers cover the tail without Close.
func TestConcurrentAppendsSigned(t *testing.T) {
	t.Parallel()
	key, pub := testKey(t)
	path := filepath.Join(t.TempDir(), "conc.jsonl")
	l, err := OpenSigned(path, key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const workers, each = 16, 300
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range each {
				if err := l.Append(Record{Protocol: "https", Host: fmt.Sprintf("w%d-%d.test", w, i), Rule: 0, Decision: Allow}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFileSigned(path, pub, false)
	if err != nil || rep.Records != workers*each || !rep.Signed {
		t.Fatalf("after concurrent appends and Sync (no Close): %+v %v", rep, err)
	}
	seen := map[string]bool{}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if seen[r.Host] {
			t.Fatalf("record %s written twice", r.Host)
		}
		seen[r.Host] = true
	}
	if len(seen) != workers*each {
		t.Fatalf("%d distinct records, want %d", len(seen), workers*each)
	}
	// The head sidecar catches up by its timer (no Close, no more appends).
	for {
		var h Head
		hb, err := os.ReadFile(path + HeadSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if json.Unmarshal(hb, &h) == nil && h.Records == workers*each && h.Sig != "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := VerifyFileSigned(path, pub, false); err != nil {
		t.Fatal(err)
	}
}

// holdSigning makes the log's next checkpoint wait, once it has started,
// until release is called; entered receives when it has started. Later
// checkpoints go through. signedInAppend reports whether a checkpoint was
// ever signed on a goroutine inside Append (never held). Defer release
// after deferring Close, so that a failing test does not hang in Close.
func holdSigning(l *Log) (entered <-chan struct{}, release func(), signedInAppend *atomic.Bool) {
	ent := make(chan struct{}, 1)
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	signedInAppend = &atomic.Bool{}
	var first atomic.Bool
	l.testHookSign = func() {
		if strings.Contains(string(debug.Stack()), "receipts.(*Log).Append") {
			// Never held, and the test that waits for entered fails
			// instead of hanging.
			signedInAppend.Store(true)
			select {
			case ent <- struct{}{}:
			default:
			}
			return
		}
		if first.Swap(true) {
			return
		}
		ent <- struct{}{}
		<-held
	}
	return ent, release, signedInAppend
}

func checkpointsOf(t *testing.T, path string, pub ed25519.PublicKey) []Checkpoint {
	t.Helper()
	cps, probs, err := readCheckpoints(path+SigSuffix, pub)
	if err != nil || len(probs) > 0 {
		t.Fatalf("signature file: %v %+v", err, probs)
	}
	return cps
}

// heldSignedLog opens a signed log in a fresh directory whose checkpoints
// hold in the test hook (holdSigning) until released.
func heldSignedLog(t *testing.T) (l *Log, path string, pub ed25519.PublicKey, entered <-chan struct{}, release func(), inAppend *atomic.Bool) {
	t.Helper()
	key, pub := testKey(t)
	path = filepath.Join(t.TempDir(), "held.jsonl")
	l, err := OpenSigned(path, key)
	if err != nil {
		t.Fatal(err)
	}
	entered, release, inAppend = holdSigning(l)
	return l, path, pub, entered, release, inAppend
}

// TestAppendLeavesSigningToTimers: Append writes the record and returns
// without signing; the checkpoint is made on the log's timer goroutine
// afterwards.
func TestAppendLeavesSigningToTimers(t *testing.T) {
	t.Parallel()
	l, path, pub, entered, release, inAppend := heldSignedLog(t)
	defer l.Close()
	defer release()
	// The first checkpoint is due at once: the timer starts it and holds
	// in the hook, before anything is signed or written.
	if err := l.Append(Record{Protocol: "https", Host: "a.test", Rule: 0, Decision: Allow}); err != nil {
		t.Fatal(err)
	}
	if n := len(lines(t, path)); n != 1 {
		t.Fatalf("%d record lines after Append returned, want 1", n)
	}
	if cps := checkpointsOf(t, path, pub); len(cps) != 0 {
		t.Fatalf("checkpoint written before the timer's signature was released: %+v", cps)
	}
	<-entered
	release()
	// Sync waits for the condition (the record covered by a checkpoint).
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if inAppend.Load() {
		t.Fatal("a checkpoint was signed inside Append")
	}
	if cps := checkpointsOf(t, path, pub); len(cps) != 1 || cps[0].Records != 1 {
		t.Fatalf("checkpoints %+v, want one for record 0", cps)
	}
	if rep, err := VerifyFileSigned(path, pub, false); err != nil || rep.Records != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
}

// TestAppendsDuringCheckpoint: records appended (concurrently) while a
// checkpoint is being signed do not wait for it: they are in the log when
// their Append returns, the checkpoint in progress does not cover them, and
// the next one does.
func TestAppendsDuringCheckpoint(t *testing.T) {
	t.Parallel()
	l, path, pub, entered, release, inAppend := heldSignedLog(t)
	defer l.Close()
	defer release()
	if err := l.Append(Record{Protocol: "https", Host: "first.test", Rule: 0, Decision: Allow}); err != nil {
		t.Fatal(err)
	}
	<-entered // the checkpoint for record 0 is in progress, and stays so
	if inAppend.Load() {
		t.Fatal("a checkpoint was signed inside Append")
	}
	const workers, each = 4, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := l.Append(Record{Protocol: "https", Host: fmt.Sprintf("w%d-%d.test", w, i), Rule: 0, Decision: Allow}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// An Append that found another writing left its record to that one:
	// wait until every record is written (the checkpoint is still held).
	l.mu.Lock()
	for l.pending > 0 && l.err == nil {
		l.flushed.Wait()
	}
	l.mu.Unlock()
	const total = 1 + workers*each
	if n := len(lines(t, path)); n != total {
		t.Fatalf("%d record lines while the checkpoint is held, want %d (appends must not wait for signing)", n, total)
	}
	if cps := checkpointsOf(t, path, pub); len(cps) != 0 {
		t.Fatalf("checkpoints %+v while the first one is held", cps)
	}
	release()
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	cps := checkpointsOf(t, path, pub)
	if len(cps) < 2 || cps[0].Records != 1 || cps[len(cps)-1].Records != total {
		t.Fatalf("checkpoints %+v, want the held one for record 0, then one covering all %d", cps, total)
	}
	if inAppend.Load() {
		t.Fatal("a checkpoint was signed inside Append")
	}
	if rep, err := VerifyFileSigned(path, pub, false); err != nil || rep.Records != total || !rep.Signed {
		t.Fatalf("after concurrent appends during a checkpoint: %+v %v", rep, err)
	}
}

// TestCloseSignsEverything: Close writes what is queued, signs it and
// rewrites the head, however soon after the appends it comes.
func TestCloseSignsEverything(t *testing.T) {
	t.Parallel()
	key, pub := testKey(t)
	for _, tc := range []struct {
		name             string
		workers, perWork int
	}{
		{"empty", 0, 0},
		{"one record", 1, 1},
		{"one appender", 1, 300},
		{"concurrent appenders", 8, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "close.jsonl")
			l, err := OpenSigned(path, key)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for w := range tc.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tc.perWork {
						if err := l.Append(Record{Protocol: "dns", Host: fmt.Sprintf("w%d-%d.test", w, i), Rule: -1, Decision: Deny}); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := l.Append(Record{Protocol: "dns", Rule: -1, Decision: Deny}); !errors.Is(err, ErrClosed) {
				t.Fatalf("Append after Close: %v", err)
			}
			want := uint64(tc.workers * tc.perWork)
			rep, err := VerifyFileSigned(path, pub, false)
			if err != nil || rep.Records != want || !rep.HeadChecked || rep.AfterHead != 0 {
				t.Fatalf("after Close: %+v %v", rep, err)
			}
			var h Head
			b, _ := os.ReadFile(path + HeadSuffix)
			if err := json.Unmarshal(b, &h); err != nil || h.Records != want || (want > 0 && h.Sig == "") {
				t.Fatalf("head after Close: %s %v", b, err)
			}
		})
	}
}
