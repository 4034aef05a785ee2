package procfs

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
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

func TestTgid(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   int
	}{
		{"Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t42\nNgid:\t0\nPid:\t43\n", 42},
		{"Name:\tTgid:\\t7\nTgid:\t9\n", 9}, // a name that looks like the line, escaped
		{"Name:\tx\nPid:\t5\n", 0},
		{"Name:\tx\nTgid:\tx\nTgid:\t5\n", 0}, // the first Tgid line counts
		{"Name:\tx\nTgid:\t-3\n", 0},
	} {
		got, err := parseTgid(tc.status)
		if got != tc.want || (err == nil) != (tc.want != 0) {
			t.Errorf("parseTgid(%q) = %d, %v; want %d", tc.status, got, err, tc.want)
		}
	}
	// A thread that is not its process's first.
	tids := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		<-tids
	}()
	tid := <-tids
	defer func() { tids <- 0 }()
	if got, err := Tgid(tid); err != nil || got != os.Getpid() {
		t.Errorf("Tgid(%d) = %d, %v; want %d", tid, got, err, os.Getpid())
	}
}

// FuzzTgid: the status file's first line is a name the process chose.
func FuzzTgid(f *testing.F) {
	f.Add("Name:\tsh\nTgid:\t42\n")
	f.Add("Tgid:\t")
	f.Fuzz(func(t *testing.T, status string) {
		if n, err := parseTgid(status); (err == nil) != (n > 0) {
			t.Fatalf("parseTgid(%q) = %d, %v", status, n, err)
		}
	})
}
