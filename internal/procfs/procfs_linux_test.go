package procfs

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Proc
		ok   bool
	}{
		{"42 (sh) S 1 42 42 0 -1", Proc{PID: 42, PPID: 1, SID: 42, State: 'S'}, true},
		{"7 (evil) Z 1 1 99) R 5 6 7 0) S 3 3 3 0", Proc{PID: 7, PPID: 3, SID: 3, State: 'S'}, true}, // a name with ')' and spaces
		{"8 (x) Z 2 2 2", Proc{PID: 8, PPID: 2, SID: 2, State: 'Z'}, true},
		{"9 no parens S 1 1 1", Proc{}, false},
		{"10 (x) S 1", Proc{}, false},
		{"11 (x) S a 1 1", Proc{}, false},
	} {
		got, err := parse(tc.want.PID|pidOf(tc.line), tc.line)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parse(%q) = %+v, %v; want %+v ok=%v", tc.line, got, err, tc.want, tc.ok)
		}
	}
	me, err := Stat(os.Getpid())
	if err != nil || me.PPID != os.Getppid() || !me.Live() {
		t.Fatalf("Stat(self) = %+v, %v", me, err)
	}
	found := false
	for _, p := range All() {
		found = found || p.PID == os.Getpid()
	}
	if !found {
		t.Fatal("All does not list this process")
	}
}

func pidOf(line string) int {
	n := 0
	for _, c := range line {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Stat reads a live process (this one: its parent and session are known
// from elsewhere) and reports a missing one as not existing.
func TestStat(t *testing.T) {
	p, err := Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	sid, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.PPID != os.Getppid() || p.SID != sid || !p.Live() {
		t.Errorf("Stat(self) = %+v, want ppid %d sid %d, live", p, os.Getppid(), sid)
	}
	// Beyond pid_max: no such process.
	if _, err := Stat(1 << 23); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a missing process: %v, want not exist", err)
	}
}
