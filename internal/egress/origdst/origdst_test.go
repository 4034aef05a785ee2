package origdst

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNotRedirected checks that a plain (not redirected) connection yields a
// clear error rather than a made-up destination. The redirected case needs
// netfilter rules in a private network namespace; it is exercised by the
// netclient integration tests.
func TestNotRedirected(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			defer c.Close()
			var b [1]byte
			c.Read(b[:])
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ap, err := Lookup(c)
	if runtime.GOOS != "linux" {
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Lookup = %v, %v; want ErrUnsupported", ap, err)
		}
		return
	}
	// Some kernels report the socket's own address for unredirected
	// connections of a conntrack-tracked flow; without conntrack the lookup
	// fails with ENOENT.
	if err == nil {
		if ap.String() != c.LocalAddr().String() {
			t.Fatalf("unredirected connection reported original destination %v (local %v)", ap, c.LocalAddr())
		}
		return
	}
	if !errors.Is(err, ErrNotRedirected) {
		t.Fatalf("Lookup err = %v, want ErrNotRedirected", err)
	}
}

// TestRedirected sets up a real nftables REDIRECT inside a private network
// namespace (re-executing the test binary under `unshare -n`) and checks that
// Lookup reports the address the client dialled, not the listener's.
func TestRedirected(t *testing.T) {
	if os.Getenv("VAK_ORIGDST_CHILD") == "1" {
		redirectedChild(t)
		return
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("skipping: needs Linux and root for a network namespace with nftables")
	}
	for _, tool := range []string{"unshare", "nft", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s not installed", tool)
		}
	}
	cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^TestRedirected$", "-test.v")
	cmd.Env = append(os.Environ(), "VAK_ORIGDST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child in new netns failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "original destination 203.0.113.7:443") {
		t.Fatalf("child did not report the original destination:\n%s", out)
	}
}

func redirectedChild(t *testing.T) {
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "route", "add", "203.0.113.0/24", "dev", "lo", "src", "127.0.0.1"},
		{"nft", "add", "table", "ip", "vaktest"},
		{"nft", "add chain ip vaktest out { type nat hook output priority -100; }"},
		{"nft", "add", "rule", "ip", "vaktest", "out", "ip", "daddr", "203.0.113.7", "tcp", "dport", "443", "redirect", "to", ":" + strconv.Itoa(port)},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := net.DialTimeout("tcp", "203.0.113.7:443", 5*time.Second)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		var b [1]byte
		c.Read(b[:])
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	ap, err := Lookup(c)
	c.Close()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if ap.String() != "203.0.113.7:443" {
		t.Fatalf("Lookup = %v, want 203.0.113.7:443", ap)
	}
	t.Logf("original destination %v", ap)
}
