package leanstage

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inRodata is a string literal: the executable's read-only data, which
// fill copies with sendfile.
const inRodata = "a string literal in the test binary's read-only data, long enough to span more than nothing"

func TestFileOffsetFindsTheExecutablesBytes(t *testing.T) {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	off, ok := fileOffset(exe, addrOf(inRodata), len(inRodata))
	if !ok {
		t.Fatal("no offset in /proc/self/exe for a string literal")
	}
	got := make([]byte, len(inRodata))
	if _, err := exe.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if string(got) != inRodata {
		t.Fatalf("bytes at offset %d of the executable = %q, want the literal", off, got)
	}
	// Negative control: heap memory is in no mapping of the executable.
	heap := strings.Repeat("x", 4096)
	if off, ok := fileOffset(exe, addrOf(heap), len(heap)); ok {
		t.Fatalf("heap string found at executable offset %d", off)
	}
}

// Both ways of filling the memfd (sendfile from the executable, write from
// memory) give a sealed copy: nothing can change it, and it reads back
// whole.
func TestSealedExecutable(t *testing.T) {
	for name, content := range map[string]string{
		"from the executable (sendfile)": inRodata,
		"from memory (write)":            strings.Repeat("lean stage\n", 50000),
	} {
		t.Run(name, func(t *testing.T) {
			p, err := sealedExecutable(content)
			if err != nil {
				t.Fatal(err)
			}
			fd := fdOf(t, p)
			t.Cleanup(func() { unix.Close(fd) })
			if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
				t.Error("memfd descriptor is not close-on-exec")
			}
			if fd < minFD {
				t.Errorf("memfd descriptor %d, want at least %d", fd, minFD)
			}
			if acc, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); acc&unix.O_ACCMODE != unix.O_RDONLY {
				t.Errorf("descriptor opened %#x, want read-only", acc&unix.O_ACCMODE)
			}
			got, err := os.ReadFile(p)
			if err != nil || string(got) != content {
				t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(content))
			}
			seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
			want := unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
			if err != nil || seals&want != want {
				t.Fatalf("seals = %#x (%v), want %#x", seals, err, want)
			}
			// The escapes: write through a new descriptor, grow, shrink,
			// remove a seal.
			w, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.Write([]byte("planted")); !errors.Is(err, unix.EPERM) {
				t.Errorf("write into the sealed memfd: %v, want EPERM", err)
			}
			if err := w.Truncate(0); !errors.Is(err, unix.EPERM) {
				t.Errorf("truncate: %v, want EPERM", err)
			}
			if err := w.Truncate(int64(len(content)) + 4096); !errors.Is(err, unix.EPERM) {
				t.Errorf("grow: %v, want EPERM", err)
			}
			if _, err := unix.FcntlInt(w.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, unix.EPERM) {
				t.Errorf("add a seal after F_SEAL_SEAL: %v, want EPERM", err)
			}
			if got, _ := os.ReadFile(p); string(got) != content {
				t.Fatal("the sealed memfd changed")
			}
		})
	}
}

// Positive control for the seal test: an unsealed memfd takes the write.
func TestUnsealedMemfdTakesWrites(t *testing.T) {
	fd, err := unix.MemfdCreate("control", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	w, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("planted")); err != nil {
		t.Fatalf("write into an unsealed memfd: %v", err)
	}
}

// The embedded program (scripts/build-vak's overlay, which scripts/test
// uses for every test binary) runs from its memfd; without it Path says
// so.
func TestPath(t *testing.T) {
	p, err := Path()
	if Embedded() == 0 {
		if !errors.Is(err, ErrNotEmbedded) {
			t.Fatalf("Path() without an embedded program: %q, %v; want ErrNotEmbedded", p, err)
		}
		if os.Getenv("VAK_REQUIRE_LEANSTAGE") == "1" {
			t.Fatal("VAK_REQUIRE_LEANSTAGE=1 but this test binary embeds no lean stage program (build it with go test -overlay \"$(scripts/build-vak -overlay DIR)\", as scripts/test does)")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Path(); again != p || err != nil {
		t.Fatalf("second Path() = %q, %v; want %q (one memfd per process)", again, err, p)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, []byte(program)) {
		t.Fatalf("memfd holds %d bytes (%v), want the %d embedded", len(got), err, len(program))
	}
	// It executes, and it is the lean program: it refuses any command
	// line but the worker's, with its usage (exit 2).
	var stderr bytes.Buffer
	cmd := exec.Command(p, "version")
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "lean stage program") {
		t.Fatalf("running %s version: %v, stderr %q; want exit 2 and the lean program's usage", p, err, stderr.String())
	}
}

func fdOf(t *testing.T, p string) int {
	t.Helper()
	fd, err := strconv.Atoi(strings.TrimPrefix(p, "/proc/self/fd/"))
	if err != nil {
		t.Fatalf("path %q is not /proc/self/fd/N", p)
	}
	return fd
}

// addrOf is where s's bytes are.
func addrOf(s string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(s))) }
