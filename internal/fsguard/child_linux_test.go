package fsguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Some properties need a process of their own: a seccomp filter is permanent,
// and mounts (procfs, bind mounts, a small tmpfs) belong in a private mount
// namespace. The test binary re-executes itself into TestChildProcess with
// childEnv naming the scenario and childDirEnv the fixture's base directory.
const (
	childEnv    = "VAK_FSGUARD_CHILD"
	childDirEnv = "VAK_FSGUARD_CHILD_DIR"
	childSkip   = "CHILD-SKIP: "
	childOK     = "CHILD-OK"
)

var childScenarios = map[string]func(t *testing.T, f *fixture){
	"no-openat2": childNoOpenat2,
	"magic-link": childMagicLink,
	"bind-alias": childBindAlias,
	"enospc":     childENOSPC,
}

// TestChildProcess runs one scenario when re-executed by runChild; in a
// normal run it does nothing.
func TestChildProcess(t *testing.T) {
	name := os.Getenv(childEnv)
	if name == "" {
		return
	}
	base := os.Getenv(childDirEnv)
	f := &fixture{
		base:       base,
		ws:         filepath.Join(base, "ws"),
		outside:    filepath.Join(base, "outside"),
		secretPath: filepath.Join(base, "outside", "secret.txt"),
	}
	childScenarios[name](t, f)
	if !t.Failed() {
		fmt.Println(childOK)
	}
}

// runChild runs a scenario in a re-executed test binary, in a new mount
// namespace when mountNS is set, and fails or skips with its result.
func runChild(t *testing.T, scenario string, mountNS bool) *fixture {
	t.Helper()
	f := newFixture(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+scenario, childDirEnv+"="+f.base)
	if mountNS {
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}
	out, err := cmd.CombinedOutput()
	if mountNS && err != nil && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL)) {
		t.Skipf("cannot create a mount namespace here (needs CAP_SYS_ADMIN): %v", err)
	}
	if i := strings.Index(string(out), childSkip); i >= 0 {
		t.Skip(strings.SplitN(string(out[i+len(childSkip):]), "\n", 2)[0])
	}
	if err != nil || !strings.Contains(string(out), childOK) {
		t.Fatalf("child %s: %v\n%s", scenario, err, out)
	}
	return f
}

func childSkipf(format string, args ...any) {
	fmt.Printf(childSkip+format+"\n", args...)
	os.Exit(0)
}

// TestNoOpenat2 makes openat2 return ENOSYS (as on Linux < 5.6) with a
// seccomp filter: Open fails closed with ErrUnsupported instead of falling
// back to string checks.
func TestNoOpenat2(t *testing.T) { runChild(t, "no-openat2", false) }

func childNoOpenat2(t *testing.T, f *fixture) {
	// Control: Open works before the filter.
	r, err := Open(f.ws, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		childSkipf("no_new_privs: %v", err)
	}
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_OPENAT2},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		childSkipf("seccomp: %v", errno)
	}
	// The filter is real.
	if _, err := unix.Openat2(unix.AT_FDCWD, f.ws, &unix.OpenHow{Flags: unix.O_PATH}); err != unix.ENOSYS {
		t.Fatalf("openat2 after the filter: %v, want ENOSYS", err)
	}
	_, err = Open(f.ws, Options{Writable: true})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "openat2") {
		t.Fatalf("Open without openat2 = %v, want ErrUnsupported naming openat2", err)
	}
}

// TestMagicLinkInsideWorkspace mounts procfs inside the workspace: its magic
// links (/proc/self/root, /proc/self/fd/N, /proc/self/cwd) lead anywhere, and
// every tool refuses them.
func TestMagicLinkInsideWorkspace(t *testing.T) { runChild(t, "magic-link", true) }

func childMagicLink(t *testing.T, f *fixture) {
	proc := filepath.Join(f.ws, "proc")
	mkdir(t, proc)
	if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
		childSkipf("mount proc: %v", err)
	}
	sf, err := os.Open(f.secretPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	paths := []string{
		"proc/self/root" + f.secretPath,
		"proc/thread-self/root" + f.secretPath,
		fmt.Sprintf("proc/self/fd/%d", sf.Fd()),
		fmt.Sprintf("proc/%d/root%s", os.Getpid(), f.secretPath),
	}
	r := f.open(t, true)
	for _, p := range paths {
		// Control: directly, the magic link reaches the secret.
		if b, err := os.ReadFile(filepath.Join(f.ws, p)); err != nil || string(b) != secret {
			t.Fatalf("control %s: %q %v", p, b, err)
		}
		res, err := r.Read(p, 0, 0)
		if !errors.Is(err, ErrSymlink) || containsSecret(res.Content) {
			t.Errorf("Read %s = %q %v, want ErrSymlink", p, res.Content, err)
		}
		if g, err := r.Grep("TOP-SECRET", p, "", 0); err == nil || len(g.Matches) > 0 {
			t.Errorf("Grep %s = %v %v", p, g, err)
		}
	}
	for _, p := range []string{"proc/self/root" + filepath.Join(f.outside, "new.txt"), "proc/self/cwd/new.txt"} {
		if err := r.Write(p, []byte("x")); !errors.Is(err, ErrSymlink) {
			t.Errorf("Write %s = %v, want ErrSymlink", p, err)
		}
	}
	if exists(filepath.Join(f.outside, "new.txt")) {
		t.Error("a write through a magic link landed outside")
	}
	if g, err := r.Grep("TOP-SECRET", "proc", "", 0); err != nil || len(g.Matches) > 0 {
		t.Errorf("Grep over the mounted proc = %v %v", g, err)
	}
	f.requireSecretIntact(t)
}

// TestBindMountAlias bind-mounts .git/hooks elsewhere in the workspace (the
// same directory under another name, with no symbolic link involved): the
// protected directory is still refused by identity. Control: a bind mount of
// an ordinary directory is writable.
func TestBindMountAlias(t *testing.T) { runChild(t, "bind-alias", true) }

func childBindAlias(t *testing.T, f *fixture) {
	mkdir(t, f.ws, ".git", "hooks")
	for src, dst := range map[string]string{".git/hooks": "h", "sub": "s2"} {
		mkdir(t, f.ws, dst)
		if err := unix.Mount(filepath.Join(f.ws, src), filepath.Join(f.ws, dst), "", unix.MS_BIND, ""); err != nil {
			childSkipf("bind mount: %v", err)
		}
	}
	r := f.open(t, true)
	if err := r.Write("h/pre-commit", []byte("#!/bin/sh\n")); !errors.Is(err, ErrProtected) {
		t.Errorf("Write through the bind mount = %v, want ErrProtected", err)
	}
	if exists(filepath.Join(f.ws, ".git/hooks/pre-commit")) {
		t.Error("hook planted through the bind mount")
	}
	if err := r.Write("s2/x.txt", []byte("ok")); err != nil {
		t.Fatalf("control: %v", err)
	}
	if got := readFile(t, filepath.Join(f.ws, "sub/x.txt")); got != "ok" {
		t.Fatalf("control content %q", got)
	}
}

// TestWriteFailureLeavesNoTemp fills a small tmpfs so that writing the
// temporary file fails for real (ENOSPC): the target is unchanged and no
// temporary file is left behind.
func TestWriteFailureLeavesNoTemp(t *testing.T) { runChild(t, "enospc", true) }

func childENOSPC(t *testing.T, f *fixture) {
	small := filepath.Join(f.base, "small")
	mkdir(t, small)
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=64k"); err != nil {
		childSkipf("mount tmpfs: %v", err)
	}
	writeFile(t, filepath.Join(small, "f.txt"), "old")
	r, err := Open(small, Options{Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	big := strings.Repeat("x", 1<<20)
	if err := r.Write("f.txt", []byte(big)); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Write = %v, want ENOSPC", err)
	}
	if err := r.Write("new/g.txt", []byte(big)); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Write new = %v, want ENOSPC", err)
	}
	if _, err := r.Edit("f.txt", "old", big, false); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Edit = %v, want ENOSPC", err)
	}
	if got := readFile(t, filepath.Join(small, "f.txt")); got != "old" {
		t.Errorf("target changed: %q", got)
	}
	if exists(filepath.Join(small, "new/g.txt")) {
		t.Error("failed write left its target")
	}
	requireNoTemp(t, small)
	// Control: a write that fits succeeds.
	if err := r.Write("f.txt", []byte("fits")); err != nil {
		t.Fatal(err)
	}
}
