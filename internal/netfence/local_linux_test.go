package netfence

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/egress/proxyproto"
)

// TestLocalFence runs the native fence in a fresh user and network namespace
// (`unshare -rn`, which an unprivileged user may create): TCP to any
// address, host loopback addresses other than 127.0.0.1 included, reaches
// the "gateway" (a unix socket outside the namespace) behind a PROXY v2
// header naming the original destination; DNS to any resolver reaches its
// DNS socket; other UDP goes nowhere; 127.0.0.1 stays the namespace's own;
// and flushing a rule is detected by VerifyLocal.
func TestLocalFence(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", "-rn", exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), roleEnv+"=local", "VAK_NETFENCE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil && strings.Contains(string(out), "unshare failed") {
		t.Skipf("no user namespaces here: %s", out)
	}
	for _, want := range []string{
		"TCP 1.2.3.4:443 -> gateway dst=1.2.3.4:443",
		"TCP 127.0.0.2:80 -> gateway dst=127.0.0.2:80",
		"DNS udp 9.9.9.9:53 answered by the gateway",
		"DNS tcp 1.1.1.1:53 answered by the gateway",
		"UDP 9.9.9.9:5353 dropped",
		"UDP 127.0.0.2:5353 dropped",
		"UDP 127.0.0.2:5353 control after the flush: received",
		"LOCALHOST own service reached",
		"TAMPER detected",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("missing %q", want)
		}
	}
	if err != nil {
		t.Fatalf("local role: %v", err)
	}
}

// localRole is TestLocalFence's side inside the namespace.
func localRole() {
	fail := func(f string, a ...any) { fmt.Printf("ERROR "+f+"\n", a...); os.Exit(1) }
	dir := os.Getenv("VAK_NETFENCE_DIR")
	data, dnsSock := filepath.Join(dir, "data.sock"), filepath.Join(dir, "dns.sock")
	dl, err := net.Listen("unix", data)
	if err != nil {
		fail("%v", err)
	}
	go func() {
		for {
			c, err := dl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				h, err := proxyproto.Read(c)
				if err != nil {
					fmt.Fprintf(c, "bad header: %v\n", err)
					return
				}
				fmt.Fprintf(c, "dst=%s\n", h.Destination)
			}()
		}
	}()
	nl, err := net.Listen("unix", dnsSock)
	if err != nil {
		fail("%v", err)
	}
	go func() {
		for {
			c, err := nl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				q[2] |= 0x80 // QR: a response
				c.Write(append(l[:], q...))
			}()
		}
	}()
	dial := func(path string) func(context.Context) (net.Conn, error) {
		return func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	l, err := ServeLocal(LocalConfig{}, dial(data), dial(dnsSock), nil)
	if err != nil {
		fail("serve: %v", err)
	}
	defer l.Close()
	for _, dst := range []string{"1.2.3.4:443", "127.0.0.2:80"} {
		c, err := net.DialTimeout("tcp4", dst, 3*time.Second)
		if err != nil {
			fail("dial %s: %v", dst, err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		fmt.Printf("TCP %s -> gateway %s\n", dst, strings.TrimSpace(line))
	}
	query := []byte{0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'x', 0, 0, 1, 0, 1}
	udp := func(dst string) bool {
		c, err := net.Dial("udp4", dst)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write(query)
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		return err == nil && n == len(query) && buf[2]&0x80 != 0
	}
	if udp("9.9.9.9:53") {
		fmt.Println("DNS udp 9.9.9.9:53 answered by the gateway")
	}
	if c, err := net.DialTimeout("tcp4", "1.1.1.1:53", 3*time.Second); err == nil {
		c.SetDeadline(time.Now().Add(3 * time.Second))
		c.Write(append([]byte{0, byte(len(query))}, query...))
		resp := make([]byte, 2+len(query))
		if _, err := io.ReadFull(c, resp); err == nil && resp[4]&0x80 != 0 {
			fmt.Println("DNS tcp 1.1.1.1:53 answered by the gateway")
		}
		c.Close()
	}
	if !udp("9.9.9.9:5353") {
		fmt.Println("UDP 9.9.9.9:5353 dropped")
	}
	// A UDP service on another loopback address of the namespace: the
	// fence drops datagrams to it; with the filter flushed (below) the
	// same datagram arrives, so the rule is what dropped it.
	pc, err := net.ListenPacket("udp4", "127.0.0.2:5353")
	if err != nil {
		fail("%v", err)
	}
	got := make(chan struct{}, 4)
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got <- struct{}{}
		}
	}()
	sendUDP := func() bool {
		if c, err := net.Dial("udp4", "127.0.0.2:5353"); err == nil {
			c.Write(query)
			c.Close()
		}
		select {
		case <-got:
			return true
		case <-time.After(time.Second):
			return false
		}
	}
	if !sendUDP() {
		fmt.Println("UDP 127.0.0.2:5353 dropped")
	}
	own, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	go func() {
		c, err := own.Accept()
		if err == nil {
			c.Write([]byte("own\n"))
			c.Close()
		}
	}()
	if c, err := net.DialTimeout("tcp4", own.Addr().String(), 3*time.Second); err == nil {
		line, _ := bufio.NewReader(c).ReadString('\n')
		if line == "own\n" {
			fmt.Println("LOCALHOST own service reached")
		}
		c.Close()
	}
	if err := VerifyLocal(LocalConfig{}); err != nil {
		fail("verify: %v", err)
	}
	if out, err := exec.Command("nft", "flush", "ruleset").CombinedOutput(); err != nil {
		fail("nft flush: %v %s", err, out)
	}
	if err := VerifyLocal(LocalConfig{}); err != nil {
		fmt.Println("TAMPER detected:", err)
	}
	if sendUDP() {
		fmt.Println("UDP 127.0.0.2:5353 control after the flush: received")
	}
}
