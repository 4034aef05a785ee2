package fsguard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Race bounds: at least minRaceIters attempts, and more (up to maxRaceIters)
// until both outcomes of the race were seen, which proves the swap really
// happened under the operation.
const (
	minRaceIters = 2000
	maxRaceIters = 200_000
)

// raceOutcome classifies one attempt.
type raceOutcome int

const (
	raceBenign  raceOutcome = iota // the operation hit the in-workspace state
	raceRefused                    // the operation was refused (the hostile state)
	raceOther                      // neither (e.g. a transient missing file)
)

// race runs flip in a loop on another goroutine while attempt runs on this
// one, and requires both outcomes to have occurred.
func race(t *testing.T, flip func() error, attempt func() raceOutcome) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var flipErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := flip(); err != nil {
				flipErr = err
				return
			}
		}
	}()
	var seen [3]int
	i := 0
	for ; i < maxRaceIters; i++ {
		seen[attempt()]++
		if t.Failed() || (i >= minRaceIters && seen[raceBenign] > 0 && seen[raceRefused] > 0) {
			break
		}
	}
	close(stop)
	wg.Wait()
	if flipErr != nil {
		t.Fatal("flipper:", flipErr)
	}
	t.Logf("%d attempts: %d benign, %d refused, %d other", i+1, seen[raceBenign], seen[raceRefused], seen[raceOther])
	if seen[raceBenign] == 0 || seen[raceRefused] == 0 {
		t.Fatalf("the race never went both ways (%v): the attempt was not real", seen)
	}
}

// exchange atomically swaps two names in dir (renameat2 RENAME_EXCHANGE), so
// the path is never missing: it is always one state or the other.
func exchange(dir, a, b string) func() error {
	return func() error {
		return unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, a), unix.AT_FDCWD, filepath.Join(dir, b), unix.RENAME_EXCHANGE)
	}
}

// TestRaceReadSymlinkSwap flips a symbolic link between a benign file in the
// workspace and the secret outside while Read goes through it: the secret is
// never returned.
func TestRaceReadSymlinkSwap(t *testing.T) {
	for _, tt := range []struct{ name, target string }{
		{"relative", "../outside/secret.txt"},
		{"absolute", ""},
		{"proc root", "/proc/self/root"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			target := tt.target
			switch tt.name {
			case "absolute":
				target = f.secretPath
			case "proc root":
				target += f.secretPath
			}
			if err := os.Symlink("hello.txt", filepath.Join(f.ws, "link")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(f.ws, "link.alt")); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(f.ws, "link.alt")); err != nil || string(b) != secret {
				t.Fatalf("control: the hostile link does not reach the secret: %v", err)
			}
			r := f.open(t, false)
			race(t, exchange(f.ws, "link", "link.alt"), func() raceOutcome {
				res, err := r.Read("link", 0, 0)
				if containsSecret(res.Content) {
					t.Fatal("Read returned the secret")
				}
				switch {
				case err == nil && strings.HasPrefix(string(res.Content), "hello"):
					return raceBenign
				case errors.Is(err, ErrOutside):
					return raceRefused
				}
				t.Fatalf("unexpected outcome: %q %v", res.Content, err)
				return raceOther
			})
			f.requireOutsideUnchanged(t)
		})
	}
}

// TestRaceWriteDirSwap exchanges a real directory with a symbolic link to the
// outside directory while Write (and Edit) target a file beneath it: nothing
// is ever created or changed outside.
func TestRaceWriteDirSwap(t *testing.T) {
	f := newFixture(t)
	mkdir(t, f.ws, "d")
	writeFile(t, filepath.Join(f.ws, "d", "secret.txt"), "inside twin")
	if err := os.Symlink("../outside", filepath.Join(f.ws, "d.alt")); err != nil {
		t.Fatal(err)
	}
	r := f.open(t, true)
	n := 0
	race(t, exchange(f.ws, "d", "d.alt"), func() raceOutcome {
		n++
		var err error
		switch n % 3 {
		case 0:
			err = r.Write("d/planted.txt", []byte("PWNED"))
		case 1:
			err = r.Write("d/secret.txt", []byte("inside twin"))
		case 2:
			_, err = r.Edit("d/secret.txt", "twin", "TWIN", false)
		}
		switch {
		case err == nil:
			return raceBenign
		case errors.Is(err, ErrSymlink):
			return raceRefused
		case errors.Is(err, ErrNoMatch):
			return raceOther // the reset write lost its race
		}
		t.Fatalf("unexpected error: %v", err)
		return raceOther
	})
	f.requireOutsideUnchanged(t)
	requireNoTemp(t, f.base)
}

// TestRaceWriteTargetSwap replaces the target file itself, between writes and
// edits, with a symbolic link to the secret and with a non-empty directory
// (which makes the final rename fail for real). The secret never changes,
// nothing appears outside, and no temporary file is left behind.
func TestRaceWriteTargetSwap(t *testing.T) {
	f := newFixture(t)
	writeFile(t, filepath.Join(f.ws, "t.txt"), "old")
	r := f.open(t, true)
	// t.txt cycles through: file, link to the secret, file, non-empty dir.
	k := 0
	flip := func() error {
		k++
		next := filepath.Join(f.ws, "t.next")
		var err error
		switch k % 4 {
		case 0, 2:
			err = os.WriteFile(next, []byte("old"), 0o644)
		case 1:
			err = os.Symlink(f.secretPath, next)
		case 3:
			if err = os.Mkdir(next, 0o755); err == nil {
				err = os.WriteFile(filepath.Join(next, "keep"), []byte("x"), 0o644)
			}
		}
		if err != nil {
			return err
		}
		if err := exchange(f.ws, "t.txt", "t.next")(); err != nil {
			return err
		}
		return os.RemoveAll(next)
	}
	n := 0
	race(t, flip, func() raceOutcome {
		n++
		var err error
		if n%2 == 0 {
			err = r.Write("t.txt", []byte("new old"))
		} else {
			_, err = r.Edit("t.txt", "old", "old!", true)
		}
		switch {
		case err == nil:
			return raceBenign
		case errors.Is(err, ErrSymlink):
			return raceRefused
		case errors.Is(err, ErrIsDir), errors.Is(err, ErrNoMatch), errors.Is(err, ErrNotFound):
			return raceOther
		}
		// A rename onto the swapped-in directory fails for real; anything
		// else that is not an escape is acceptable too, as long as the
		// invariants below hold.
		return raceOther
	})
	f.requireOutsideUnchanged(t)
	requireNoTemp(t, f.base)
}

// TestRaceGrepGlobSwap exchanges a directory with a symbolic link to the
// outside directory while grep and glob walk through it: the secret is never
// matched and no path beneath the link is reported.
func TestRaceGrepGlobSwap(t *testing.T) {
	f := newFixture(t)
	mkdir(t, f.ws, "g")
	writeFile(t, filepath.Join(f.ws, "g", "twin.txt"), "TOP-SECRET twin inside\n")
	if err := os.Symlink("../outside", filepath.Join(f.ws, "g.alt")); err != nil {
		t.Fatal(err)
	}
	r := f.open(t, false)
	n := 0
	race(t, exchange(f.ws, "g", "g.alt"), func() raceOutcome {
		n++
		switch n % 3 {
		case 0:
			res, err := r.Glob("g/**", 0)
			if err != nil {
				t.Fatal(err)
			}
			switch strings.Join(res.Paths, ",") {
			case "g/twin.txt":
				return raceBenign
			case "":
				return raceRefused
			}
			t.Fatalf("Glob reported %q", res.Paths)
		case 1:
			res, err := r.Grep("TOP-SECRET", "g", "", 0)
			for _, m := range res.Matches {
				if strings.Contains(m.Text, secret) {
					t.Fatalf("Grep matched the secret: %+v", m)
				}
			}
			switch {
			case err == nil && len(res.Matches) == 1:
				return raceBenign
			case errors.Is(err, ErrOutside):
				return raceRefused
			}
			t.Fatalf("Grep: %+v %v", res, err)
		}
		res, err := r.Grep("TOP-SECRET", "", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Matches {
			if strings.Contains(m.Text, secret) || !strings.HasSuffix(m.Path, "/twin.txt") {
				t.Fatalf("Grep matched outside: %+v", m)
			}
		}
		return raceOther
	})
	f.requireOutsideUnchanged(t)
}
