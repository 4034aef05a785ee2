// Package kubesession is vak's kubernetes session backend: a session is a
// Pod on a cluster instead of a container on the host's Docker Engine, with
// the same worker, protocol and guarantees.
//
// What runs where (docs/kubernetes.md has the whole picture):
//
//   - The pod's init containers run vak's worker image (the static vak
//     binary alone, see WorkerImage): vak-fence installs the network fence
//     in the pod's network namespace with NET_ADMIN, the only capability
//     any container of the pod holds, and records its self-test; vak-install
//     copies vak onto a volume the workload container mounts read-only;
//     vak-sync receives the host workspace as a tar stream (attached
//     stdin) and unpacks it, checked, onto the pod's workspace volume.
//   - The session container runs the session image with vak's worker as PID
//     1, every capability dropped, no privilege escalation, seccomp
//     RuntimeDefault, no service account token, and the session's limits.
//   - The host reaches the worker through one exec stream per connection
//     (`vak __worker-relay`, which refuses a socket not served by PID 1):
//     a command costs a round trip on that stream, not a new exec.
//   - The host keeps a record per session (the cluster, context, namespace
//     and pod), so `vak session exec/ls/rm` find it again; the pod's labels
//     say whose it is, and gc removes pods whose worker ended.
//
// Nothing the pod writes reaches the host except through vak's checked
// path (`vak session pull`): the workspace on the cluster is a copy.
package kubesession

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"vak/internal/config"
	"vak/internal/engine"
	"vak/internal/errclass"
)

// Errors of the kubernetes backend.
var (
	// ErrCluster reports a cluster vak cannot use: no kubeconfig, an
	// unknown context, an API server that does not answer. Nothing was
	// created.
	ErrCluster = errclass.New(errclass.Unavailable, "kubernetes cluster unavailable")
	// ErrPodFailed reports a session pod that did not start: an image that
	// cannot be pulled, a fence whose self-test failed, a workspace that
	// could not be unpacked. The pod is removed; the message says which
	// container failed and why.
	ErrPodFailed = errclass.New(errclass.Unavailable, "session pod failed to start")
	// ErrInvalid reports a session request the backend refuses (a
	// workspace path the pod cannot mount, a network policy it does not
	// provide yet).
	ErrInvalid = errclass.New(errclass.Invalid, "invalid kubernetes session")
	// ErrNotKubernetes reports a session ID with no kubernetes record here.
	ErrNotKubernetes = errors.New("not a kubernetes session")
)

// Names of the pod's containers and volumes.
const (
	ContainerFence   = "vak-fence"
	ContainerInstall = "vak-install"
	ContainerSync    = "vak-sync"
	ContainerSession = "session"
)

// Labels of a session pod (besides vak's managed/kind labels, shared with
// Docker sessions).
const (
	LabelManaged   = engine.LabelManaged
	LabelKind      = engine.LabelKind
	LabelSession   = "vak.session"
	LabelOwner     = engine.LabelOwner
	LabelTask      = "vak.task"
	LabelWorkspace = engine.LabelWorkspace // a hash of the workspace path here (label values cannot hold it)
	KindSession    = "session"
	// AnnotationWorkspace holds the workspace path itself; AnnotationHost
	// the host that created the session.
	AnnotationWorkspace = "vak.dev/workspace"
	AnnotationHost      = "vak.dev/host"
	AnnotationCreated   = "vak.dev/created"
	// AnnotationHostID is the creating host's identity (Manager's host
	// ID): gc collects only this host's pods.
	AnnotationHostID = "vak.dev/host-id"
	// AnnotationOwnerProc is the owning process's token on this host
	// (engine.OwnerToken) of a session created with --hold: gc removes
	// the pod once that process is gone.
	AnnotationOwnerProc = "vak.dev/owner-proc"
)

// Cluster is a Kubernetes API client and the namespace sessions go to.
type Cluster struct {
	Config    *rest.Config
	Namespace string
	// Context is the kubeconfig context used ("" when the config was
	// given directly).
	Context string
	// Kubeconfig is the kubeconfig file used ("" for the default rules).
	Kubeconfig string

	api *api
}

// NewCluster is the cluster of cfg with sessions in namespace.
func NewCluster(cfg *rest.Config, namespace string) (*Cluster, error) {
	a, err := newAPI(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCluster, err)
	}
	return &Cluster{Config: cfg, Namespace: namespace, api: a}, nil
}

// Describe names the cluster for messages: its context, kubeconfig and
// namespace.
func (c *Cluster) Describe() string {
	kc := c.Kubeconfig
	if kc == "" {
		kc = "$KUBECONFIG or ~/.kube/config"
	}
	return fmt.Sprintf("context %q of %s, namespace %s", c.Context, kc, c.Namespace)
}

// Connect loads the cluster of k: the kubeconfig k.Kubeconfig, else
// $KUBECONFIG, else ~/.kube/config; the context k.Context, else the current
// one; the namespace k.Namespace, else the context's, else "default". The
// error wraps ErrCluster and names the file and context.
func Connect(k config.Kubernetes) (*Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.Kubeconfig != "" {
		// The config load expanded ~ and made it absolute.
		rules.ExplicitPath = k.Kubeconfig
	}
	over := &clientcmd.ConfigOverrides{CurrentContext: k.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over)
	where := describeKubeconfig(rules)
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: read kubeconfig %s: %v", ErrCluster, where, err)
	}
	ctxName := k.Context
	if ctxName == "" {
		ctxName = raw.CurrentContext
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, fmt.Errorf("%w: no kubeconfig (%s): set kubernetes.kubeconfig in the user config, or $KUBECONFIG", ErrCluster, where)
		}
		return nil, fmt.Errorf("%w: kubeconfig %s, context %q: %v", ErrCluster, where, ctxName, err)
	}
	ns := k.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	rc.QPS, rc.Burst = 50, 100
	c, err := NewCluster(rc, ns)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s, context %q: %w", where, ctxName, err)
	}
	c.Context, c.Kubeconfig = ctxName, rules.ExplicitPath
	return c, nil
}

// describeKubeconfig names the files rules read, for messages.
func describeKubeconfig(rules *clientcmd.ClientConfigLoadingRules) string {
	if rules.ExplicitPath != "" {
		return rules.ExplicitPath
	}
	if len(rules.Precedence) == 0 {
		return "(none)"
	}
	return strings.Join(rules.Precedence, ":")
}

// SessionID is the ID of the kubernetes session for task in workspace,
// created by the host (state directory) hostID: shaped like a Docker
// session's (TASK-HASH), hashed with the backend's name and the host, so
// the two backends' sessions of one task, and two hosts' sessions of one
// task and workspace path, never share an ID (or a pod name).
func SessionID(hostID, task, workspace string) string {
	h := sha256.Sum256([]byte("kubernetes\x00" + hostID + "\x00" + task + "\x00" + workspace))
	return task + "-" + hex.EncodeToString(h[:5])
}

// PodName is the pod of session id: a DNS label (task names may hold
// characters pod names may not).
func PodName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "vak-session-" + hex.EncodeToString(h[:8])
}

// workspaceLabel is the label value of a workspace path.
func workspaceLabel(ws string) string {
	h := sha256.Sum256([]byte(ws))
	return hex.EncodeToString(h[:16])
}

// RecordDir is where the host keeps its kubernetes session records.
func RecordDir(state string) string { return filepath.Join(state, "kube-sessions") }

// hostname names this host in pod annotations.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
