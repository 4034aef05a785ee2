package kubesession

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"vak/internal/config"
	"vak/internal/engine"
)

// Info describes a kubernetes session.
type Info struct {
	ID, Task, Workspace string
	Pod                 string // namespace/name
	Image               string
	State               string // the pod's phase, or "gone"
	Created             time.Time
}

// selector selects this user's session pods carrying the manager's labels.
func (m *Manager) selector() string {
	l := map[string]string{LabelManaged: "true", LabelKind: KindSession, LabelOwner: strconv.Itoa(os.Getuid())}
	maps.Copy(l, m.Labels)
	return labels.SelectorFromSet(l).String()
}

// List lists this user's sessions in the manager's namespace, oldest first.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	c := m.Cluster
	pods, err := c.api.listPods(ctx, c.Namespace, metav1.ListOptions{LabelSelector: m.selector()})
	if err != nil {
		return nil, apiError("list session pods in "+c.Namespace, err)
	}
	var out []Info
	for _, p := range pods.Items {
		created, _ := time.Parse(time.RFC3339, p.Annotations[AnnotationCreated])
		out = append(out, Info{
			ID: p.Labels[LabelSession], Task: p.Labels[LabelTask], Workspace: p.Annotations[AnnotationWorkspace],
			Pod: p.Namespace + "/" + p.Name, Image: sessionImage(&p), State: podState(&p), Created: created,
		})
	}
	slices.SortFunc(out, func(a, b Info) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// podState is a pod's phase, with the session container's end.
func podState(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "removing"
	}
	s := strings.ToLower(string(p.Status.Phase))
	if st := containerStatus(p.Status.ContainerStatuses, ContainerSession); st != nil && st.State.Terminated != nil {
		s += fmt.Sprintf(" (exit %d)", st.State.Terminated.ExitCode)
	}
	return s
}

func sessionImage(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == ContainerSession {
			return c.Image
		}
	}
	return ""
}

// Remove deletes session id's pod (its network policy goes with it) and
// record. A session whose pod is already gone loses its record; an ID with
// neither is ErrNoSession.
func (m *Manager) Remove(ctx context.Context, id string) error {
	rec, err := m.readRecord(id)
	if err != nil {
		return err
	}
	if err := m.sameCluster(rec); err != nil {
		return err
	}
	return m.remove(ctx, rec)
}

// remove deletes rec's pod and network policy, then its record.
func (m *Manager) remove(ctx context.Context, rec *record) error {
	c := m.Cluster
	grace := int64(0)
	err := c.api.deletePod(ctx, rec.Namespace, rec.Pod, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return apiError("delete pod "+rec.Namespace+"/"+rec.Pod, err)
	}
	// Owned by the pod, so the cluster's garbage collector removes it too;
	// deleted here as well for clusters (and API-only test servers)
	// without one.
	err = c.api.deleteNetworkPolicy(ctx, rec.Namespace, rec.Pod)
	if err != nil && !apierrors.IsNotFound(err) {
		return apiError("delete network policy "+rec.Namespace+"/"+rec.Pod, err)
	}
	p, err := m.recordPath(rec.ID)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Removed is one session GC removed, and why.
type Removed struct{ ID, Pod, Reason string }

// GC removes this user's sessions that are over: pods whose worker ended
// (idle timeout, lifetime, killed) or that failed, pods this host created
// whose record is gone (nothing here can reach them), records whose pod is
// gone, and this host's warm pool pods that can no longer be claimed.
func (m *Manager) GC(ctx context.Context) ([]Removed, error) {
	c := m.Cluster
	pods, err := c.api.listPods(ctx, c.Namespace, metav1.ListOptions{LabelSelector: m.selector()})
	if err != nil {
		return nil, apiError("list session pods in "+c.Namespace, err)
	}
	var out []Removed
	var errs []error
	seen := map[string]bool{}
	host, err := m.hostID()
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		id := p.Labels[LabelSession]
		seen[id] = true
		rec := &record{ID: id, Namespace: p.Namespace, Pod: p.Name}
		var why string
		switch {
		case p.DeletionTimestamp != nil:
			continue
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			why = "its pod is " + strings.ToLower(string(p.Status.Phase)) + containerEnd(p, ContainerSession)
		case !m.hasRecord(id) && p.Annotations[AnnotationHostID] == host:
			why = "orphaned: this host has no record of it"
		case p.Annotations[AnnotationHostID] == host && ownerGone(p.Annotations[AnnotationOwnerProc]):
			why = "its owner (vak session create --hold) is gone"
		default:
			continue
		}
		if err := m.remove(ctx, rec); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Removed{ID: id, Pod: p.Namespace + "/" + p.Name, Reason: why})
	}
	pooled, err := m.poolGC(ctx, host)
	out = append(out, pooled...)
	if err != nil {
		errs = append(errs, err)
	}
	ents, _ := os.ReadDir(RecordDir(m.StateDir))
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || seen[id] || !validID(id) {
			continue
		}
		rec, err := readRecordFile(filepath.Join(RecordDir(m.StateDir), e.Name()), id)
		if err != nil || rec.Namespace != c.Namespace || rec.Context != c.Context {
			continue
		}
		if time.Since(rec.Created) < time.Minute {
			continue // a create in progress has its record before its pod
		}
		if err := m.remove(ctx, rec); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Removed{ID: id, Pod: rec.Namespace + "/" + rec.Pod, Reason: "its pod is gone"})
	}
	return out, errors.Join(errs...)
}

// ownerGone reports whether the owning process of token (if any) is
// known to be gone.
func ownerGone(token string) bool {
	if token == "" {
		return false
	}
	alive, known := engine.OwnerAlive(token)
	return known && !alive
}

func (m *Manager) hasRecord(id string) bool {
	_, err := m.readRecord(id)
	return err == nil
}

// RecordCluster is the cluster session id's record names (its kubeconfig,
// context and namespace), so a later command reaches the session without
// a config; ErrNoSession wrapping ErrNotKubernetes when there is no record.
func RecordCluster(state, id string) (config.Kubernetes, error) {
	if !validID(id) {
		return config.Kubernetes{}, fmt.Errorf("%w: %q is not a session ID: %w", ErrNoSession, id, ErrNotKubernetes)
	}
	rec, err := readRecordFile(filepath.Join(RecordDir(state), id+".json"), id)
	if err != nil {
		return config.Kubernetes{}, err
	}
	return config.Kubernetes{Kubeconfig: rec.Kubeconfig, Context: rec.Context, Namespace: rec.Namespace}, nil
}

// RecordClusters are the distinct clusters (kubeconfig, context,
// namespace) of the records in state.
func RecordClusters(state string) []config.Kubernetes {
	ents, _ := os.ReadDir(RecordDir(state))
	var out []config.Kubernetes
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		k, err := RecordCluster(state, id)
		if err == nil && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// RecordWorkspace is the host workspace of session id's record.
func RecordWorkspace(state, id string) (string, error) {
	if !validID(id) {
		return "", fmt.Errorf("%w: %q is not a session ID: %w", ErrNoSession, id, ErrNotKubernetes)
	}
	rec, err := readRecordFile(filepath.Join(RecordDir(state), id+".json"), id)
	if err != nil {
		return "", err
	}
	return rec.Workspace, nil
}
