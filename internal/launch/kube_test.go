package launch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/catrust"
	"vak/internal/egress/ca"
	"vak/internal/errclass"
	"vak/internal/kubesession"
	"vak/internal/paths"
)

// kubeconfigAt writes a kubeconfig whose only cluster is server.
func kubeconfigAt(t *testing.T, server string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "kubeconfig")
	body := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"" + server + "\", insecure-skip-tls-verify: true}\n" +
		"users:\n- name: u\n  user: {token: not-a-real-token}\ncontexts:\n- name: ctx\n  context: {cluster: c, user: u, namespace: agents}\ncurrent-context: ctx\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestKubeSessionRefused: what kubernetes sessions do not provide yet is
// refused (class Invalid, saying what) before the cluster is contacted,
// never run weaker; a cluster that does not answer, or a kubeconfig that
// is missing, fails closed (class Unavailable, naming the kubeconfig and
// context) and leaves no record.
func TestKubeSessionRefused(t *testing.T) {
	dead := kubeconfigAt(t, "https://127.0.0.1:1")
	cfgBody := func(kubeconfig, extra string) string {
		return "version = 1\n[session]\nbackend = \"kubernetes\"\n[kubernetes]\nkubeconfig = \"" + kubeconfig + "\"\n" + extra
	}
	for _, tc := range []struct {
		name, body string
		create     SessionCreate
		class      *errclass.Class
		want       string
	}{
		{"docker", cfgBody(dead, ""), SessionCreate{Task: "t", Docker: true}, errclass.Invalid, "nested Docker is not available in kubernetes sessions"},
		{"mount", cfgBody(dead, ""), SessionCreate{Task: "t", Mounts: []string{"/etc"}}, errclass.Invalid, "a kubernetes session has no host paths"},
		{"from with image", cfgBody(dead, ""), SessionCreate{Task: "t", From: strings.Repeat("a", 64), ImageSet: true}, errclass.Invalid, "--from and --image exclude each other"},
		{"from a non-key", cfgBody(dead, ""), SessionCreate{Task: "t", From: "v1"}, errclass.Invalid, "is not a snapshot key"},
		{"from an unknown key", cfgBody(dead, ""), SessionCreate{Task: "t", From: strings.Repeat("a", 64)}, errclass.Invalid, "no such kubernetes snapshot: " + strings.Repeat("a", 64) + " (vak session snapshot ID makes one)"},
		{"proxied", cfgBody(dead, "[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"example.com\"]\n"), SessionCreate{Task: "t"}, errclass.Unavailable, "kubernetes cluster unavailable"},
		{"unreachable", cfgBody(dead, ""), SessionCreate{Task: "t"}, errclass.Unavailable, "kubernetes cluster unavailable: server version (context \"ctx\" of "},
		{"no kubeconfig", cfgBody(filepath.Join(t.TempDir(), "missing"), ""), SessionCreate{Task: "t"}, errclass.Unavailable, "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, cfg, file := setup(t, tc.body)
			created := false
			tc.create.Created = func(string) { created = true }
			req := Request{Workspace: ws, Config: cfg, UserConfig: file, Labels: map[string]string{"vak.test": "1"}}
			err := CreateSession(context.Background(), req, tc.create)
			if errclass.Of(err) != tc.class || !strings.Contains(err.Error(), tc.want) || created {
				t.Fatalf("err = %v (class %v), created %v: want class %v and %q", err, errclass.Of(err), created, tc.class, tc.want)
			}
			t.Logf("%v", err)
			if strings.Contains(err.Error(), "not-a-real-token") {
				t.Errorf("the kubeconfig's token is in the error: %v", err)
			}
			if tc.class == errclass.Unavailable && !errors.Is(err, kubesession.ErrCluster) {
				t.Errorf("err = %v: want ErrCluster", err)
			}
			state, _ := paths.StateDir()
			if recs, _ := filepath.Glob(filepath.Join(kubesession.RecordDir(state), "*.json")); len(recs) != 0 {
				t.Errorf("records left: %v", recs)
			}
		})
	}
}

// TestKubeMCPAndPoolRefused: vak mcp --session-new with sessions on the
// kubernetes backend is refused with what to do, and the warm pool fills
// on the cluster or fails naming it: neither is ever served by Docker
// sessions instead.
func TestKubeMCPAndPoolRefused(t *testing.T) {
	ws, cfg, file := setup(t, "version = 1\n[session]\nbackend = \"kubernetes\"\n")
	req := Request{Workspace: ws, Config: cfg, UserConfig: file, Labels: map[string]string{"vak.test": "1"}}
	_, err := OpenMCPSession(context.Background(), req, Sessions(req, nil), "", nil, nil)
	if errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), "kubernetes sessions cannot serve MCP yet") {
		t.Fatalf("err = %v (class %v)", err, errclass.Of(err))
	}
	// Nor does the warm pool fill with Docker containers for it: off, it
	// says so; on, it needs the cluster.
	if err := FillPool(context.Background(), req, false, io.Discard); errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), "pool_size is 0") {
		t.Fatalf("pool fill, pool off: %v", err)
	}
	dead := kubeconfigAt(t, "https://127.0.0.1:1")
	ws, cfg, file = setup(t, "version = 1\n[session]\nbackend = \"kubernetes\"\npool_size = 1\n[kubernetes]\nkubeconfig = \""+dead+"\"\n")
	req = Request{Workspace: ws, Config: cfg, UserConfig: file, Labels: map[string]string{"vak.test": "1"}}
	if err := FillPool(context.Background(), req, false, io.Discard); !errors.Is(err, kubesession.ErrCluster) {
		t.Fatalf("pool fill, cluster unreachable: %v", err)
	}
}

// KubeReceipts is refused with what to do when sessions do not run on a
// cluster, and when this host never deployed the gateway (it has no key to
// verify the receipts with), before the cluster is asked anything.
func TestKubeReceiptsRefused(t *testing.T) {
	dead := kubeconfigAt(t, "https://127.0.0.1:1")
	for _, tc := range []struct{ name, body, want string }{
		{"docker backend", "version = 1\n", "the kubernetes gateway's receipts are fetched from the cluster"},
		{"no key", "version = 1\n[session]\nbackend = \"kubernetes\"\n[kubernetes]\nkubeconfig = \"" + dead + "\"\n", "only the host that deployed it can verify its receipts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cfg, file := setup(t, tc.body)
			_, _, _, err := KubeReceipts(context.Background(), Request{Config: cfg, UserConfig: file})
			if errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v (class %v), want invalid and %q", err, errclass.Of(err), tc.want)
			}
		})
	}
}

// The trust files of a cluster gateway are the same bytes at every create
// (the salted Java trust store included): trust that changed at each
// create would change the gateway's digest and roll the namespace's
// gateway under its running sessions at every proxied create. A new CA
// gives new trust.
func TestKubeTrustStable(t *testing.T) {
	dir := t.TempDir()
	if _, err := ca.LoadOrCreate(paths.GatewayCADir(dir)); err != nil {
		t.Fatal(err)
	}
	a, err := kubeTrust(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kubeTrust(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(catrust.Files) || !maps.EqualFunc(a, b, bytes.Equal) {
		t.Fatalf("two creates' trust differ (%d and %d files)", len(a), len(b))
	}
	os.RemoveAll(paths.GatewayCADir(dir))
	if _, err := ca.LoadOrCreate(paths.GatewayCADir(dir)); err != nil {
		t.Fatal(err)
	}
	c, err := kubeTrust(dir)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a[catrust.CAFile], c[catrust.CAFile]) {
		t.Error("a new CA kept the old trust")
	}
}
