package cli

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/egress/egresstest"
	"vak/internal/egress/sigv4"
	"vak/internal/testenv"
)

// EnvRequireAWS makes a missing AWS CLI (Debian's awscli) a failure.
const EnvRequireAWS = "VAK_REQUIRE_AWSCLI"

const (
	awsRealKeyID  = "AKIAREALKEY00000E2E1"
	awsRealSecret = "REALx/secret+access0123456789abcdefghij"
	awsRealToken  = "REALxSESSIONTOKEN0123456789abcdef"
)

// awsMock is a local S3 and STS that accepts only requests signed with
// the real key (verified like AWS does: the signature over the request as
// received, the payload hash declared or of the body received).
type awsMock struct {
	mu      sync.Mutex
	objects map[string][]byte
	seen    []string
	refused int
}

func (m *awsMock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a, err := sigv4.Parse(r)
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if err == nil && payload == "" {
		if a.Presigned {
			payload = sigv4.UnsignedPayload
		} else {
			sum := sha256.Sum256(body)
			payload = hex.EncodeToString(sum[:])
		}
	}
	if err == nil && a.KeyID != awsRealKeyID {
		err = fmt.Errorf("unknown key %q", a.KeyID)
	}
	tok := r.Header.Get("X-Amz-Security-Token")
	if a != nil && a.Presigned {
		tok = r.URL.Query().Get("X-Amz-Security-Token")
	}
	if err == nil && tok != awsRealToken {
		err = fmt.Errorf("session token %q", tok)
	}
	if err == nil {
		_, err = sigv4.Verify(r, a, awsRealSecret, r.Host, payload)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(payload) == 64 {
		payload = "sha256"
	}
	m.seen = append(m.seen, fmt.Sprintf("%s %s %s (payload %s, %d bytes): %v", r.Method, r.Host, r.URL.Path, payload, len(body), err))
	if err != nil {
		m.refused++
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "<Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message></Error>", err)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	host, _, _ := net.SplitHostPort(r.Host)
	switch {
	case host == "sts.aws.test":
		fmt.Fprint(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult><Arn>arn:aws:iam::123456789012:user/mock-e2e</Arn><UserId>AIDAMOCK</UserId><Account>123456789012</Account></GetCallerIdentityResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></GetCallerIdentityResponse>`)
	case r.Method == http.MethodPut:
		m.objects[r.URL.Path] = body
		w.Header().Set("ETag", `"`+hex.EncodeToString(sha256.New().Sum(nil))[:32]+`"`)
	case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2":
		var b strings.Builder
		fmt.Fprint(&b, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>`)
		fmt.Fprint(&b, `<Contents><Key>hello.txt</Key><LastModified>2026-12-04T00:00:00.000Z</LastModified><ETag>"x"</ETag><Size>5</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>`)
		io.WriteString(w, b.String())
	case r.Method == http.MethodGet:
		obj, ok := m.objects[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(obj)
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

// awsCLI is Debian's AWS CLI (a pip-installed one elsewhere on PATH may
// live where the sandbox cannot read it).
func awsCLI(t *testing.T) string {
	if _, err := os.Stat("/usr/bin/aws"); err == nil {
		return "/usr/bin/aws"
	}
	p, err := exec.LookPath("aws")
	if err != nil {
		testenv.Missing(t, EnvRequireAWS, "no AWS CLI (apt-get install awscli)")
	}
	return p
}

// TestRunProxiedAWSCLI: the real AWS CLI in `vak run --network proxied`
// holds only placeholder credentials (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) and signs with them; the
// gateway verifies each signature with the placeholder secret and signs
// the request again with the real key, which a local S3/STS mock checks
// like AWS would: list, put (a 3 MB upload), a presigned GET fetched with
// curl, and sts get-caller-identity (a signed form body) all work. The
// placeholder key alone does not verify at the mock (control), and
// nothing real is in the sandbox's environment or files. The mock
// listens on an unprivileged port, so the test runs as any user.
func TestRunProxiedAWSCLI(t *testing.T) {
	testenv.RequireLandlock(t)
	aws := awsCLI(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Cleanup(func() { stopOnDemand(t) })
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	const mockIP = "127.0.0.7"
	mock := &awsMock{objects: map[string][]byte{}}
	port := tlsMock(t, ca, mockIP, 0, mock, "s3.aws.test", "sts.aws.test")
	hosts := `["s3.aws.test", "sts.aws.test"]`
	cfg := writeConfig(t, `version = 1
[sandbox]
read = [`+strconv.Quote(filepath.Dir(aws))+`]
[network]
policy = "proxied"
[[network.rules]]
hosts = `+hosts+`
cidrs = ["`+mockIP+`/32"]
ports = [`+strconv.Itoa(port)+`]
[network.dns.overrides]
"s3.aws.test" = ["`+mockIP+`"]
"sts.aws.test" = ["`+mockIP+`"]
[gateway]
extra_ca_bundles = [`+strconv.Quote(caFile)+`]
[secrets.AWS_ACCESS_KEY_ID]
value = "`+awsRealKeyID+`"
hosts = `+hosts+`
aws = "access_key_id"
[secrets.AWS_SECRET_ACCESS_KEY]
value = "`+awsRealSecret+`"
hosts = `+hosts+`
aws = "secret_access_key"
[secrets.AWS_SESSION_TOKEN]
value = "`+awsRealToken+`"
hosts = `+hosts+`
aws = "session_token"
[session]
run_network_idle = "0"
`)
	ws := tempWorkspace(t)
	os.WriteFile(filepath.Join(ws, "aws-config"), []byte("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n"), 0o644)
	s3 := fmt.Sprintf("--endpoint-url https://s3.aws.test:%d", port)
	sts := fmt.Sprintf("--endpoint-url https://sts.aws.test:%d", port)
	script := `set -u
export AWS_CONFIG_FILE=$PWD/aws-config AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_PAGER= AWS_EC2_METADATA_DISABLED=true
A="` + aws + `"
$A ` + s3 + ` s3 ls s3://bucket/; echo ls-rc=$?
head -c 3000000 /dev/urandom > big
$A ` + s3 + ` s3 cp --no-progress big s3://bucket/big; echo cp-rc=$?
url=$($A ` + s3 + ` s3 presign s3://bucket/big --expires-in 300)
curl -sS -o got "$url"; cmp big got && echo presign-ok
$A ` + sts + ` sts get-caller-identity --query Arn --output text; echo sts-rc=$?
echo "placeholders: $AWS_ACCESS_KEY_ID $AWS_SECRET_ACCESS_KEY $AWS_SESSION_TOKEN"
grep -rl REALx "$HOME" "$PWD" /proc/self/environ 2>/dev/null | wc -l
`
	start := time.Now()
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--home", "workspace", "--", "sh", "-c", script)
	t.Logf("aws cli run: %s", time.Since(start).Round(time.Millisecond))
	mock.mu.Lock()
	seen := append([]string(nil), mock.seen...)
	mock.mu.Unlock()
	for _, want := range []string{"hello.txt", "ls-rc=0", "cp-rc=0", "presign-ok", "arn:aws:iam::123456789012:user/mock-e2e", "sts-rc=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if code != 0 || t.Failed() || strings.Contains(out+errs, "REALx") || !strings.HasSuffix(strings.TrimSpace(out), "\n0") {
		t.Fatalf("exit %d\n%s\n%s\nthe mock saw %q", code, out, errs, seen)
	}
	if mock.refused != 0 || len(seen) < 4 {
		t.Fatalf("the mock refused %d of %q", mock.refused, seen)
	}
	t.Logf("the mock verified:\n%s", strings.Join(seen, "\n"))
	// Control: the placeholders the sandbox has do not sign a request
	// the mock accepts.
	var ph sigv4.Credentials
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "placeholders: ")); strings.HasPrefix(line, "placeholders: ") && len(f) == 3 {
			ph = sigv4.Credentials{KeyID: f[0], Secret: f[1], Token: f[2]}
		}
	}
	if !strings.HasPrefix(ph.Secret, "vakph_") {
		t.Fatalf("the sandbox's AWS_SECRET_ACCESS_KEY is not a placeholder: %q", ph.Secret)
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://s3.aws.test:%d/bucket/big", port), nil)
	req.Header.Set("X-Amz-Content-Sha256", sigv4.UnsignedPayload)
	if err := sigv4.Sign(req, ph, "us-east-1", "s3", time.Now().UTC().Format("20060102T150405Z"), sigv4.UnsignedPayload, "x-amz-content-sha256"); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(mockIP, strconv.Itoa(port)))
		},
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
	}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a request signed with the placeholders got %d from the mock, want 403", resp.StatusCode)
	}
}
