package proxynet

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/catrust"
	"vak/internal/egress/egressconfig"
	"vak/internal/paths"
	"vak/internal/receipts"
	"vak/internal/testenv"
)

// clientsImage builds (once per test, removed at its end) the test image
// plus the host's own curl and node with the shared libraries they load:
// real, unmodified TLS clients, no registry needed. The image holds no CA
// file: whatever these clients trust comes from the environment vak gives
// the command. It skips t when the host has no curl or node.
func clientsImage(t *testing.T, base string) string {
	t.Helper()
	files := map[string]string{} // image path -> host path
	for _, tool := range []string{"curl", "node"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			testenv.Missing(t, testenv.EnvRequireDocker, "the session client test needs "+tool+" on the host (copied into a local image)")
		}
		files["bin/"+tool] = p
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", p, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			for _, f := range strings.Fields(sc.Text()) {
				if strings.HasPrefix(f, "/") {
					files[strings.TrimPrefix(f, "/")] = f
				}
			}
		}
	}
	ctxDir := t.TempDir()
	h := sha256.New()
	for dst, src := range files {
		data, err := os.ReadFile(src) // follows symlinks: the image gets the file
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", dst, len(data))
		h.Write(data)
		p := filepath.Join(ctxDir, "root", dst)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM "+base+"\nCOPY root/ /\nENV LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu\n"), 0o644)
	var rnd [4]byte
	rand.Read(rnd[:])
	tag := "vaktest-clients:" + hex.EncodeToString(h.Sum(nil)[:6]) + "-" + hex.EncodeToString(rnd[:])
	cmd := exec.Command("docker", append([]string{"build", "-q", "-t", tag}, append(testenv.LabelArgs(t), ctxDir)...)...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", tag, err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	return tag
}

// The done-when of issue 11, through vak's own path: a session on the
// proxied network runs curl, a Node https.get and a Go net/http client
// (scripts/probe) with the CA trusted only through the environment vak
// gives the command; a placeholder reaches the bound upstream as the real
// value, which is in neither `docker inspect` nor the gateway's
// /proc/1/environ; a denied name gets the gateway's block message; the
// upstream is trusted only through the host bundle (no extra_ca_bundles);
// `vak session rm` leaves nothing of the topology; every gateway lifetime's
// receipts are kept and verify.
func TestProxiedSessionClients(t *testing.T) {
	testenv.CheckLeftovers(t)
	img := clientsImage(t, testenv.TestNetImage(t))
	vak := testenv.Vak(t)
	certs := testenv.GenCerts(t, "allowed.test", "other.test")
	inet := testenv.CreateNetwork(t, testenv.UniqueName("internet"))
	upID, upIP := testenv.RunContainer(t, "", inet, "-v", certs.Dir+":/certs:ro", img, "testnet", "upstream", "--cert", "/certs/cert.pem", "--key", "/certs/key.pem")
	testenv.WaitReady(t, upID)

	var rnd [8]byte
	rand.Read(rnd[:])
	secret := "env-secret-" + hex.EncodeToString(rnd[:])
	base, _ := filepath.EvalSymlinks(t.TempDir())
	xdg := filepath.Join(base, "xdg-state")
	stateDir := filepath.Join(xdg, "vak")
	os.MkdirAll(stateDir, 0o700)
	// The upstream's CA is only in the "host bundle" (SSL_CERT_FILE of the
	// vak process stands in for /etc/ssl/certs/ca-certificates.crt): no
	// extra_ca_bundles.
	cfgFile := filepath.Join(base, "config.toml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
[network]
policy = "proxied"
[[network.rules]]
name = "test upstream"
hosts = ["allowed.test"]
cidrs = ["%s/32"]
[[network.rules]]
name = "no cidr"
hosts = ["other.test"]
[network.dns.overrides]
"allowed.test" = [%q]
"other.test" = [%q]
[secrets.TOKEN]
env = "VAKTEST_TOKEN"
hosts = ["allowed.test"]
`, img, upIP, upIP, upIP)), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, "ws")))
	if err != nil {
		t.Fatal(err)
	}
	key := Key(ws)
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	env := append(os.Environ(), "XDG_STATE_HOME="+xdg, "VAKTEST_TOKEN="+secret, "SSL_CERT_FILE="+certs.CA)
	vakCmd := func(args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(vak, append([]string{"--config", cfgFile}, args...)...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	topology := func() string {
		var all []string
		for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
			if out := testenv.Docker(t, append(kind, "--filter", "label="+LabelKey+"="+key)...); out != "" {
				all = append(all, kind[0]+": "+strings.Join(strings.Fields(out), " "))
			}
		}
		return strings.Join(all, "; ")
	}
	create := func(task string) string {
		t.Helper()
		out, errs, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", task, "--network", "proxied")...)
		if err != nil {
			t.Fatalf("session create: %v\n%s", err, errs)
		}
		id := strings.TrimSpace(out)
		t.Cleanup(func() { vakCmd(append(append([]string{"session", "rm"}, labels...), id)...) })
		// Test plumbing: the gateway (and only it) reaches the test internet.
		if _, err := dockerOut("network", "connect", inet, "vak-gw-"+key); err != nil && !strings.Contains(err.Error(), "already") {
			t.Fatal(err)
		}
		return id
	}
	sexec := func(id, script string) (string, error) {
		t.Helper()
		out, errs, err := vakCmd("session", "exec", id, "--", "sh", "-c", script)
		return strings.TrimSpace(out + errs), err
	}

	id := create("clients")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := dockerOut("logs", "--tail", "30", "vak-gw-"+key)
			t.Logf("gateway log:\n%s", out)
		}
	})

	t.Run("CommandEnvironment", func(t *testing.T) {
		out, err := sexec(id, `echo "$SSL_CERT_FILE|$NODE_EXTRA_CA_CERTS|$CURL_CA_BUNDLE|$TOKEN"`)
		want := catrust.Dir + "/" + catrust.BundleFile + "|" + catrust.Dir + "/" + catrust.CAFile + "|" + catrust.Dir + "/" + catrust.BundleFile + "|vakph_"
		if err != nil || !strings.HasPrefix(out, want) {
			t.Fatalf("session command environment: %v %q, want prefix %q", err, out, want)
		}
		if all, _ := sexec(id, "env"); strings.Contains(all, secret) {
			t.Fatal("the real secret value is in the session's environment")
		}
	})
	t.Run("Curl", func(t *testing.T) {
		out, err := sexec(id, "curl -sS -w ' code=%{http_code}' https://allowed.test/status/200")
		if err != nil || !strings.HasSuffix(out, "code=200") {
			t.Fatalf("curl with the environment's trust: %v %s", err, out)
		}
		// Control: the same curl without the trust variables does not
		// trust the gateway (so the environment is what made it work).
		out, err = sexec(id, "env -u CURL_CA_BUNDLE -u SSL_CERT_FILE curl -sS --capath /nonexistent https://allowed.test/status/200")
		if err == nil || !strings.Contains(strings.ToLower(out), "certificate") {
			t.Fatalf("control: curl without the trust variables: %v %s", err, out)
		}
	})
	t.Run("NodeHTTPSGet", func(t *testing.T) {
		js := `require("https").get("https://allowed.test/status/200", r => { console.log("status", r.statusCode); r.resume() }).on("error", e => { console.log("error", e.message); process.exit(1) })`
		out, err := sexec(id, "node -e '"+js+"'")
		if err != nil || !strings.Contains(out, "status 200") {
			t.Fatalf("node https.get: %v %s", err, out)
		}
		out, err = sexec(id, "env -u NODE_EXTRA_CA_CERTS node -e '"+js+"'")
		if err == nil || strings.Contains(out, "status 200") {
			t.Fatalf("control: node without NODE_EXTRA_CA_CERTS: %v %s", err, out)
		}
	})
	t.Run("GoNetHTTP", func(t *testing.T) {
		out, err := sexec(id, "probe tls https://allowed.test/status/200")
		if err != nil || !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
			t.Fatalf("Go net/http client: %v %s", err, out)
		}
		if out, err := sexec(id, "env -u SSL_CERT_FILE probe tls https://allowed.test/status/200"); err == nil || strings.HasPrefix(out, "OK") {
			t.Fatalf("control: Go client without SSL_CERT_FILE: %v %s", err, out)
		}
	})
	t.Run("TrustFiles", func(t *testing.T) {
		// The trust check without Java: the bundle the variables name holds
		// the gateway's CA, and the PKCS#12 trust store is there.
		out, err := sexec(id, `grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE"; test -s `+catrust.Dir+`/`+catrust.StoreFile+` && echo store; cmp "$NODE_EXTRA_CA_CERTS" `+catrust.Dir+`/`+catrust.CAFile+` && echo same`)
		if err != nil || !strings.Contains(out, "store") || !strings.Contains(out, "same") {
			t.Fatalf("trust files: %v %s", err, out)
		}
	})
	t.Run("PlaceholderSwappedOnlyUpstream", func(t *testing.T) {
		testenv.ResetUpstream(t, upIP)
		out, err := sexec(id, `curl -sS -H "Authorization: Bearer $TOKEN" https://allowed.test/sink`)
		if err != nil || strings.Contains(out, secret) {
			t.Fatalf("curl with the placeholder: %v %s", err, out)
		}
		reqs := testenv.UpstreamRequests(t, upIP)
		if reqs.Count != 1 || strings.Join(reqs.Requests[0].Headers["Authorization"], "") != "Bearer "+secret {
			t.Fatalf("the upstream did not receive the real value: %+v", reqs)
		}
		// Nowhere to be seen in the gateway container's configuration or
		// its process environment.
		insp := testenv.Docker(t, "inspect", "vak-gw-"+key)
		if strings.Contains(insp, secret) {
			t.Error("docker inspect of the gateway shows the secret value")
		}
		if !strings.Contains(insp, "XDG_STATE_HOME") {
			t.Fatalf("control: docker inspect shows no environment at all: the check proves nothing")
		}
		pid := testenv.Docker(t, "inspect", "-f", "{{.State.Pid}}", "vak-gw-"+key)
		environ, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil {
			t.Skipf("cannot read the gateway's /proc/%s/environ (not root?): %v", pid, err)
		}
		if !bytes.Contains(environ, []byte("XDG_STATE_HOME=")) || bytes.Contains(environ, []byte(secret)) {
			t.Errorf("the gateway's /proc/1/environ: %q", environ)
		}
	})
	t.Run("DeniedNameGetsBlockMessage", func(t *testing.T) {
		for _, u := range []string{"http://denied.test/x", "https://denied.test/x"} {
			out, err := sexec(id, "curl -sS -w ' code=%{http_code}' "+u)
			if err != nil || !strings.Contains(out, "vak gateway: 403") || !strings.Contains(out, "denied.test") || !strings.HasSuffix(out, "code=403") {
				t.Errorf("%s: %v %s", u, err, out)
			}
		}
		// The name resolves to the sinkhole, not to anything real.
		if out, _ := sexec(id, "probe dns denied.test 127.0.0.11"); !strings.Contains(out, egressconfig.DefaultSinkhole.String()) {
			t.Errorf("denied name: %s", out)
		}
		// An allowed name that resolves only to a non-public address with
		// no CIDR for it gets its own explicit message.
		if out, _ := sexec(id, "curl -sS https://other.test/"); !strings.Contains(out, "vak gateway: 403") || !strings.Contains(out, "non-public") {
			t.Errorf("other.test: %s", out)
		}
	})

	// rm: nothing of the topology stays; its receipts are kept.
	if _, errs, err := vakCmd(append(append([]string{"session", "rm"}, labels...), id)...); err != nil {
		t.Fatalf("session rm: %v %s", err, errs)
	}
	if left := topology(); left != "" {
		t.Fatalf("session rm left the topology behind: %s", left)
	}
	// Two more lifetimes: each keeps its own receipts. In the last, the
	// host bundle does not hold the upstream's CA (the control: the
	// upstream was trusted through the host bundle alone).
	other := testenv.GenCerts(t, "unrelated.test")
	for i := range 2 {
		want := "OK 200"
		if i == 1 {
			env = append(env, "SSL_CERT_FILE="+other.CA)
			want = "OK 502"
		}
		id := create(fmt.Sprintf("again%d", i))
		if out, err := sexec(id, "probe tls https://allowed.test/status/200"); !strings.HasPrefix(out, want) {
			t.Fatalf("lifetime %d: %v %s, want %s", i, err, out, want)
		}
		if _, errs, err := vakCmd(append(append([]string{"session", "rm"}, labels...), id)...); err != nil {
			t.Fatalf("session rm: %v %s", err, errs)
		}
	}
	if left := topology(); left != "" {
		t.Fatalf("session rm left the topology behind: %s", left)
	}
	// Signed with the installation's key: they verify on the host.
	pub, err := receipts.LoadPublicKey(filepath.Join(paths.GatewayReceiptsKeyDir(stateDir), receipts.PubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	all, err := receipts.List(ReceiptsDir(stateDir, key), pub)
	if err != nil {
		t.Fatal(err)
	}
	var list []receipts.Summary
	for _, s := range all {
		if s.Path == SelfTestLog(stateDir, key) {
			// One fence self-test per topology, each passed.
			if s.Records != 3 || s.Problem != "" || !s.Signed {
				t.Errorf("fence self-test log: %+v", s)
			}
			continue
		}
		list = append(list, s)
	}
	if len(list) != 3 || len(all) != 4 {
		t.Fatalf("receipts kept: %+v, want 3 gateway logs (one per lifetime) and the self-test log", all)
	}
	for _, s := range list {
		if s.Problem != "" || s.Records == 0 || !s.Signed {
			t.Errorf("%s: %d records, %s", s.Path, s.Records, s.Problem)
		}
		if data, _ := os.ReadFile(s.Path); bytes.Contains(data, []byte(secret)) || !bytes.Contains(data, []byte("allowed.test")) {
			t.Errorf("%s: want allowed.test recorded and no secret value", s.Path)
		}
	}
	first, _ := os.ReadFile(list[0].Path)
	if !bytes.Contains(first, []byte("denied.test")) {
		t.Errorf("the first lifetime's receipts lost the denied name")
	}
	out, errs, err := vakCmd("receipts", "ls")
	if err != nil || strings.Count(out, " OK\n") != 4 {
		t.Errorf("vak receipts ls: %v\n%s%s", err, out, errs)
	}
}
