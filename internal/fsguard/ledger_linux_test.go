package fsguard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// shortMargin shortens racyMargin for a test: the test file systems (tmpfs,
// ext4) stamp in nanoseconds, so a margin well above a kernel tick is
// enough, and the test need not wait seconds for records to be trusted.
func shortMargin(t *testing.T) time.Duration {
	old := racyMargin
	racyMargin = 30 * time.Millisecond
	t.Cleanup(func() { racyMargin = old })
	return racyMargin + 10*time.Millisecond
}

// requireLedgerAgrees fails the test unless the Ledger's Scan is the Scan
// a full walk gives now (the walk is the positive control: it sees every
// change, so one the Ledger missed shows as a difference). With setuid,
// every file with the bit must be new since the Ledger's last pass (the
// callers clear the bits after each pass, as the sweep does).
func requireLedgerAgrees(t *testing.T, l *Ledger, tree *Tree, setuid bool, step string) Scan {
	t.Helper()
	want, err := tree.Scan(setuid)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Scan(tree, setuid)
	if err != nil {
		t.Fatal(err)
	}
	if off := l.Stats().Off; off != "" {
		t.Fatalf("%s: the ledger gave up: %s", step, off)
	}
	requireScanIsWalks(t, "ledger", got, want, tree, step)
	return got
}

// clearSetuid clears every setuid and setgid bit in the workspace, as the
// sweep after a command does.
func clearSetuid(t *testing.T, tree *Tree) {
	t.Helper()
	sc, err := tree.Scan(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range sc.Setuid {
		if _, err := tree.ClearSetuid(rel); err != nil {
			t.Fatal(err)
		}
	}
}

// The Ledger against the full walk over random changes, each run as a cold
// `vak run` does it: a new process loads the record, scans before the
// command (no setuid), the command changes the tree, the sweep scans again
// (setuid) and the record is saved. The changes are every kind the
// tripwire must see that a sandboxed command can make (the sandbox
// refuses setuid mode changes, so the bits come only with new files): new
// directories with .git entries made in one go, renames of directories
// holding .git entries, .git renamed to a plain name and back, directories
// moved out of the workspace and in from outside, RENAME_EXCHANGE,
// symbolic links in place of directories, hard links, files made with the
// setuid bit, and directories' times set back to hide a change.
func TestLedgerAgreesWithWalk(t *testing.T) {
	wait := shortMargin(t)
	trusted := 0
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			hw := newHostWorld(t)
			file := filepath.Join(hw.other, "ledger")
			out, r := filepath.Join(hw.other, "moved"), rand.New(rand.NewPCG(seed, 11))
			os.MkdirAll(out, 0o755)
			pick := func() string { return randomRel(r) }
			var log []string
			for run := range 40 {
				l := OpenLedger(hw.ws, file)
				if run > 0 && !l.Stats().Loaded {
					t.Fatalf("run %d: the record was not loaded: %s", run, l.Stats().Why)
				}
				requireLedgerAgrees(t, l, hw.tree, false, fmt.Sprintf("run %d, before", run))
				if st := l.Stats(); st.Read < st.Dirs {
					trusted++
				}
				for range 1 + r.IntN(8) {
					p, q := pick(), pick()
					op := ledgerOps[r.IntN(len(ledgerOps))]
					randomChange(hw, out, r, op, p, q)
					log = append(log, fmt.Sprintf("%s %q %q", op, p, q))
				}
				requireLedgerAgrees(t, l, hw.tree, true, fmt.Sprintf("run %d, after (last ops: %s)", run, strings.Join(log[max(0, len(log)-8):], "; ")))
				clearSetuid(t, hw.tree)
				if err := l.Save(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(wait)
			}
		})
	}
	// The positive control of the point of it all: most runs took most
	// directories from the record.
	if trusted < 100 {
		t.Fatalf("only %d of 240 runs took a directory from the record", trusted)
	}
}

// ledgerOps are the changes TestLedgerAgreesWithWalk draws from
// (randomChange): watchOps without the mode changes, which the sandbox
// refuses, and with "hide".
var ledgerOps = []string{"mkdir", "mkdir", "write", "rename", "exchange", "remove", "symlink", "link", "move out", "move in", "create setuid", "hide"}

// ledgerRun is one cold run's passes over ws without changes: load, scan,
// scan with setuid, save. It returns the first pass's stats.
func ledgerRun(t *testing.T, ws, file string, tree *Tree) LedgerStats {
	t.Helper()
	l := OpenLedger(ws, file)
	requireLedgerAgrees(t, l, tree, false, "before")
	st := l.Stats()
	requireLedgerAgrees(t, l, tree, true, "after")
	if err := l.Save(); err != nil {
		t.Fatal(err)
	}
	return st
}

// A .git planted deep in a directory the record trusts, with the
// directory's access and modification times put back (what an agent
// hiding the change would do), is found: utimensat cannot set the ctime.
// Positive control: the same runs without the plant read no directory.
func TestLedgerSeesChangeBehindRestoredTimes(t *testing.T) {
	wait := shortMargin(t)
	hw := newHostWorld(t)
	file := filepath.Join(hw.other, "ledger")
	deep := filepath.Join(hw.ws, "a", "b", "c")
	must(t, os.MkdirAll(deep, 0o755))
	writeFile(t, filepath.Join(deep, "f"), "x")
	time.Sleep(wait)
	if st := ledgerRun(t, hw.ws, file, hw.tree); st.Loaded || st.Read != 4 {
		t.Fatalf("first run: %+v, want a walk of 4 directories", st)
	}
	time.Sleep(wait)
	if st := ledgerRun(t, hw.ws, file, hw.tree); !st.Loaded || st.Read != 0 || st.Dirs != 4 {
		t.Fatalf("unchanged: %+v, want 0 of 4 read", st)
	}
	var before unix.Stat_t
	must(t, unix.Lstat(deep, &before))
	must(t, os.MkdirAll(filepath.Join(deep, ".git", "hooks"), 0o755))
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, deep, []unix.Timespec{before.Atim, before.Mtim}, 0))
	var after unix.Stat_t
	must(t, unix.Lstat(deep, &after))
	if after.Mtim != before.Mtim {
		t.Fatal("the modification time was not put back")
	}
	l := OpenLedger(hw.ws, file)
	sc := requireLedgerAgrees(t, l, hw.tree, false, "planted")
	if sc.Git["a/b/c/.git"].Kind != Dir || l.Stats().Read != 1 {
		t.Fatalf("planted .git: git %v, stats %+v", sc.GitNames(), l.Stats())
	}
}

// Setuid: a file made with the bit, a hard link to it, a file renamed over
// an old name, and a directory moved in from outside with such a file are
// reported; a file that had the bit before the first pass is not (nothing
// sandboxed made it), and neither is one whose mode changed (the sandbox
// refuses that change; this is the limit NoSetIDModes states).
func TestLedgerSetuidOfNewFiles(t *testing.T) {
	wait := shortMargin(t)
	hw := newHostWorld(t)
	file := filepath.Join(hw.other, "ledger")
	d := filepath.Join(hw.ws, "d")
	must(t, os.MkdirAll(d, 0o755))
	writeFile(t, filepath.Join(d, "old-setuid"), "x")
	must(t, os.Chmod(filepath.Join(d, "old-setuid"), os.ModeSetuid|0o755))
	writeFile(t, filepath.Join(d, "plain"), "x")
	writeFile(t, filepath.Join(d, "over"), "x")
	time.Sleep(wait)
	ledgerRunKeepBits(t, hw, file)
	time.Sleep(wait)
	l := OpenLedger(hw.ws, file)
	if _, err := l.Scan(hw.tree, false); err != nil {
		t.Fatal(err)
	}
	mk := func(p string) {
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o6755)
		must(t, err)
		unix.Close(fd)
	}
	mk(filepath.Join(d, "new"))
	must(t, os.Link(filepath.Join(d, "new"), filepath.Join(d, "link")))
	mk(filepath.Join(hw.ws, "tmp"))
	must(t, os.Rename(filepath.Join(hw.ws, "tmp"), filepath.Join(d, "over")))
	must(t, os.MkdirAll(filepath.Join(hw.other, "in"), 0o755))
	mk(filepath.Join(hw.other, "in", "s"))
	must(t, os.Rename(filepath.Join(hw.other, "in"), filepath.Join(d, "in")))
	must(t, os.Chmod(filepath.Join(d, "plain"), os.ModeSetgid|0o755))
	sc, err := l.Scan(hw.tree, true)
	must(t, err)
	want := []string{"d/in/s", "d/link", "d/new", "d/over"}
	if !slices.Equal(sc.Setuid, want) {
		t.Fatalf("setuid %q, want %q", sc.Setuid, want)
	}
}

// ledgerRunKeepBits is ledgerRun without the comparison's bit clearing.
func ledgerRunKeepBits(t *testing.T, hw *hostWorld, file string) {
	t.Helper()
	l := OpenLedger(hw.ws, file)
	for _, setuid := range []bool{false, true} {
		if _, err := l.Scan(hw.tree, setuid); err != nil {
			t.Fatal(err)
		}
	}
	must(t, l.Save())
}

// A directory changed within racyMargin of its read is read again by the
// next pass although its ctime did not change since: a change in the same
// clock tick would not have changed it. Positive control: once the
// directory is older than the margin, the next pass trusts it.
func TestLedgerRacyDirectoryIsReadAgain(t *testing.T) {
	wait := shortMargin(t)
	hw := newHostWorld(t)
	file := filepath.Join(hw.other, "ledger")
	must(t, os.MkdirAll(filepath.Join(hw.ws, "a"), 0o755))
	time.Sleep(wait)
	ledgerRun(t, hw.ws, file, hw.tree)
	writeFile(t, filepath.Join(hw.ws, "a", "f"), "x") // then at once:
	ledgerRun(t, hw.ws, file, hw.tree)
	if st := ledgerRun(t, hw.ws, file, hw.tree); st.Read != 1 {
		t.Fatalf("racy directory: %+v, want it read again", st)
	}
	time.Sleep(wait)
	ledgerRun(t, hw.ws, file, hw.tree) // records it as old enough
	if st := ledgerRun(t, hw.ws, file, hw.tree); st.Read != 0 {
		t.Fatalf("settled directory: %+v, want none read", st)
	}
}

// A record that cannot be trusted is not: damaged, cut short, of another
// workspace, from before a reboot, of a workspace directory since
// replaced, or made before the clock was set back. Each run must then
// read every directory (or refuse the file), and agree with the walk.
func TestLedgerRefusesRecord(t *testing.T) {
	wait := shortMargin(t)
	cases := []struct {
		name   string
		spoil  func(t *testing.T, hw *hostWorld, file string) (ws string)
		loaded bool // the file is still loaded (the pass finds the fault)
	}{
		{"damaged", func(t *testing.T, hw *hostWorld, file string) string {
			b, _ := os.ReadFile(file)
			b[len(b)/2] ^= 1
			must(t, os.WriteFile(file, b, 0o600))
			return hw.ws
		}, false},
		{"cut short", func(t *testing.T, hw *hostWorld, file string) string {
			b, _ := os.ReadFile(file)
			must(t, os.WriteFile(file, b[:len(b)-9], 0o600))
			return hw.ws
		}, false},
		{"another workspace's", func(t *testing.T, hw *hostWorld, file string) string {
			other := filepath.Join(hw.other, "ws2")
			must(t, os.MkdirAll(filepath.Join(other, "a", ".git"), 0o755))
			return other
		}, false},
		{"before a reboot", func(t *testing.T, hw *hostWorld, file string) string {
			old := readBootID
			readBootID = func() string { return "another-boot" }
			t.Cleanup(func() { readBootID = old })
			return hw.ws
		}, false},
		{"workspace replaced", func(t *testing.T, hw *hostWorld, file string) string {
			must(t, os.Rename(hw.ws, hw.ws+".old"))
			must(t, os.MkdirAll(filepath.Join(hw.ws, "a", "b", ".git"), 0o755))
			must(t, os.MkdirAll(filepath.Join(hw.ws, "c"), 0o755))
			return hw.ws
		}, true},
		{"clock set back", func(t *testing.T, hw *hostWorld, file string) string {
			old := clockOffset
			clockOffset = func() int64 { return old() - int64(time.Minute) }
			t.Cleanup(func() { clockOffset = old })
			return hw.ws
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hw := newHostWorld(t)
			file := filepath.Join(hw.other, "ledger")
			must(t, os.MkdirAll(filepath.Join(hw.ws, "a", "b"), 0o755))
			must(t, os.MkdirAll(filepath.Join(hw.ws, "c"), 0o755))
			time.Sleep(wait)
			ledgerRun(t, hw.ws, file, hw.tree)
			if st := ledgerRun(t, hw.ws, file, hw.tree); st.Read != 0 {
				t.Fatalf("control: %+v, want nothing read", st)
			}
			ws := c.spoil(t, hw, file)
			tree, err := OpenTree(ws)
			must(t, err)
			defer tree.Close()
			l := OpenLedger(ws, file)
			requireLedgerAgrees(t, l, tree, false, c.name)
			st := l.Stats()
			if st.Loaded != c.loaded || st.Read != st.Dirs {
				t.Fatalf("%s: %+v, want loaded %v and every directory read", c.name, st, c.loaded)
			}
		})
	}
}

// A file system mounted below the workspace (another device) makes the
// Ledger give up: every pass walks, and the walk still finds what is there.
func TestLedgerGivesUpOnMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	hw := newHostWorld(t)
	m := filepath.Join(hw.ws, "m")
	must(t, os.MkdirAll(m, 0o755))
	if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(m, unix.MNT_DETACH)
	must(t, os.MkdirAll(filepath.Join(m, "r", ".git"), 0o755))
	l := OpenLedger(hw.ws, "")
	sc, err := l.Scan(hw.tree, false)
	if err != nil || !strings.Contains(l.Stats().Off, "another file system") || sc.Git["m/r/.git"].Kind != Dir {
		t.Fatalf("mount: %v %v; stats %+v", sc.GitNames(), err, l.Stats())
	}
}

// A workspace's first record removes the records not written for
// ledgerMaxAge (workspaces long gone) and keeps the others.
func TestLedgerPrunesOldRecords(t *testing.T) {
	hw := newHostWorld(t)
	dir := filepath.Join(hw.other, "ledgers")
	must(t, os.MkdirAll(dir, 0o700))
	old, recent := filepath.Join(dir, "old"), filepath.Join(dir, "recent")
	writeFile(t, old, "x")
	writeFile(t, recent, "x")
	long := time.Now().Add(-ledgerMaxAge - time.Hour)
	must(t, os.Chtimes(old, long, long))
	l := OpenLedger(hw.ws, filepath.Join(dir, "ws"))
	if _, err := l.Scan(hw.tree, false); err != nil {
		t.Fatal(err)
	}
	must(t, l.Save())
	if _, err := os.Stat(old); err == nil {
		t.Error("the old record was kept")
	}
	for _, f := range []string{recent, filepath.Join(dir, "ws")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// BenchmarkLedgerPass is one cold run's first pass over a tree of n files
// (ten per directory) whose record says nothing changed: the load of the
// record and a stat per directory.
func BenchmarkLedgerPass(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			old := racyMargin
			racyMargin = 0
			defer func() { racyMargin = old }()
			base := b.TempDir()
			ws := filepath.Join(base, "ws")
			for i := range n {
				d := filepath.Join(ws, fmt.Sprint(i/1000), fmt.Sprint(i/100%10), fmt.Sprint(i/10%10))
				if i%10 == 0 {
					must2(b, os.MkdirAll(d, 0o755))
				}
				must2(b, os.WriteFile(filepath.Join(d, fmt.Sprint(i)), nil, 0o644))
			}
			tree, err := OpenTree(ws)
			must2(b, err)
			defer tree.Close()
			file := filepath.Join(base, "ledger")
			l := OpenLedger(ws, file)
			_, err = l.Scan(tree, false)
			must2(b, err)
			must2(b, l.Save())
			b.ResetTimer()
			for range b.N {
				l := OpenLedger(ws, file)
				if _, err := l.Scan(tree, false); err != nil || l.Stats().Read != 0 {
					b.Fatal(err, l.Stats())
				}
			}
		})
	}
}

func must2(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// FuzzLedgerLoad: whatever the record's file holds, opening it does not
// panic, and a record that loads still gives the walk's answer (its
// checksum makes accepting garbage rare; the pass checks what it accepts).
func FuzzLedgerLoad(f *testing.F) {
	base := f.TempDir()
	ws := filepath.Join(base, "ws")
	for _, d := range []string{"a/b/.git", "c"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	file := filepath.Join(base, "ledger")
	tree, err := OpenTree(ws)
	if err != nil {
		f.Fatal(err)
	}
	defer tree.Close()
	l := OpenLedger(ws, file)
	if _, err := l.Scan(tree, false); err != nil {
		f.Fatal(err)
	}
	l.dirty = true
	if err := l.Save(); err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(file)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add([]byte(ledgerMagic))
	want, err := tree.Scan(false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "ledger")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		l := OpenLedger(ws, p)
		got, err := l.Scan(tree, false)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got.Git, want.Git) {
			t.Fatalf("git %v, want %v", got.GitNames(), want.GitNames())
		}
	})
}
