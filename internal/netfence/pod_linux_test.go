package netfence

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// TestPodFence runs the pod fence in a fresh user and network namespace
// (`unshare -rn`) with a veth pair: a datagram to a neighbour's
// address leaves before the fence (the positive control; the self-test fails there too) and is refused
// after it, for IPv4 and IPv6; loopback keeps working; the self-test
// passes; a thread without CAP_NET_ADMIN (the workload) cannot flush the
// rules; and a rule root deletes afterwards is found by VerifyPod.
func TestPodFence(t *testing.T) {
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-rn", exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), roleEnv+"=pod")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil && strings.Contains(string(out), "unshare failed") {
		t.Skipf("no user namespaces here: %s", out)
	}
	if strings.Contains(string(out), "SELFTEST unfenced failed=0") || !strings.Contains(string(out), "SELFTEST unfenced failed=") {
		t.Error("the self-test passed in an unfenced namespace with routes: it proves nothing")
	}
	for _, want := range []string{
		"CONTROL udp4 sent", "CONTROL udp6 sent",
		"FENCED receipt ok",
		"AFTER udp4 refused", "AFTER udp6 refused", "AFTER tcp4 refused",
		"AFTER loopback ok",
		"TAMPER without NET_ADMIN refused",
		"VERIFY still ok",
		"VERIFY detects a deleted rule",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("missing %q", want)
		}
	}
}

// podRole is TestPodFence inside the namespaces.
func podRole() {
	say := func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"addr", "add", "10.99.0.1/24", "dev", "d0"},
		{"addr", "add", "fd99::1/64", "dev", "d0", "nodad"},
		{"link", "set", "d0", "up"},
		{"link", "set", "d1", "up"},
		// Routes everywhere, so an unfenced namespace sends.
		{"route", "add", "default", "via", "10.99.0.2", "dev", "d0"},
		{"-6", "route", "add", "default", "via", "fd99::2", "dev", "d0"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			say("ERROR ip %v: %v %s", args, err, out)
			os.Exit(1)
		}
	}
	send := func(network, addr string) error {
		c, err := net.Dial(network, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	}
	result := func(err error, ok, bad string) string {
		if err != nil {
			return bad + " (" + err.Error() + ")"
		}
		return ok
	}
	say("CONTROL udp4 %s", result(send("udp", "10.99.0.2:9"), "sent", "failed"))
	say("CONTROL udp6 %s", result(send("udp", "[fd99::2]:9"), "sent", "failed"))

	// The self-test's own control: without the fence it fails.
	failed := 0
	for _, c := range SelfTestPod(context.Background()) {
		if !c.OK {
			failed++
		}
	}
	say("SELFTEST unfenced failed=%d", failed)

	rc, err := FencePod(context.Background(), PodConfig{Mode: "none"})
	if err != nil {
		say("ERROR fence: %v %+v", err, rc)
		os.Exit(1)
	}
	say("FENCED receipt ok=%v rules=%s checks=%d", rc.OK, rc.Rules, len(rc.Checks))
	say("AFTER udp4 %s", result(send("udp", "10.99.0.2:9"), "sent", "refused"))
	say("AFTER udp6 %s", result(send("udp", "[fd99::2]:9"), "sent", "refused"))
	_, terr := net.DialTimeout("tcp", "10.99.0.2:80", 2*time.Second)
	say("AFTER tcp4 %s", result(terr, "connected", "refused"))
	say("AFTER loopback %s", func() string {
		if c := loopbackCheck(); c.OK {
			return "ok"
		}
		return "failed"
	}())

	// The workload: the same namespaces, no capability on its thread.
	done := make(chan string)
	go func() {
		runtime.LockOSThread() // the thread dies with its changed credentials
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- "capset: " + err.Error()
			return
		}
		conn, err := nftables.New()
		if err != nil {
			done <- "refused (" + err.Error() + ")"
			return
		}
		conn.FlushRuleset()
		if err := conn.Flush(); err != nil {
			done <- "refused (" + err.Error() + ")"
			return
		}
		done <- "FLUSHED"
	}()
	say("TAMPER without NET_ADMIN %s", <-done)
	if _, err := VerifyPod(PodConfig{Mode: "none"}); err == nil {
		say("VERIFY still ok")
	} else {
		say("VERIFY failed: %v", err)
	}
	// Root deletes the output chain's rule: VerifyPod notices.
	conn, _ := nftables.New()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: PodTable}
	ch := &nftables.Chain{Name: "output", Table: t}
	rules, _ := conn.GetRules(t, ch)
	if len(rules) > 0 {
		conn.DelRule(rules[0])
		conn.Flush()
	}
	if _, err := VerifyPod(PodConfig{Mode: "none"}); err != nil {
		say("VERIFY detects a deleted rule: %v", err)
	}
}
