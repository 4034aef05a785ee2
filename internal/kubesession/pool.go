package kubesession

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The warm pool (session.pool_size): pods made ahead of any create, which
// get as far as a pod can without the workspace — scheduled, images
// pulled, fence installed and self-tested, vak installed — and then wait
// in their vak-sync init container for the workspace. A create whose pod
// would be the same (PoolKey) claims one instead of making a pod: it
// relabels it as its session (an update with the pod's resource version,
// so of two creates racing for one pod exactly one gets it), uploads the
// workspace and waits for the worker. A claimed pod never goes back to the
// pool. A pool pod's lifetime counts from when it was made.
const (
	KindPool     = "pool"
	LabelPoolKey = "vak.pool-key"
	// LabelPod is the pod's own name: what its NetworkPolicy selects, kept
	// when a pool pod becomes a session.
	LabelPod = "vak.pod"
)

// PoolKey is the key of the pods s could claim: a digest of everything
// fixed in a pod when it is made (images, workspace path, mode, limits,
// environment, gateway, lifetimes), nothing of the session's identity.
func PoolKey(s Spec) (string, error) {
	s.ID, s.Task, s.Owner, s.OwnerProc, s.HostID, s.Labels = "pool", "", 0, "", "", nil
	s.Created = time.Time{}
	s.defaults()
	p, err := Pod(s)
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(p.Spec)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:10]), nil
}

// poolSelector selects this user's pool pods of key (with the manager's
// labels).
func (m *Manager) poolSelector(key string) string {
	l := map[string]string{LabelManaged: "true", LabelKind: KindPool, LabelPoolKey: key, LabelOwner: strconv.Itoa(os.Getuid())}
	maps.Copy(l, m.Labels)
	return labels.SelectorFromSet(l).String()
}

// FillPool makes pool pods for s until size of them are alive (not
// ending), without waiting for them to be warm; it returns how many it
// made.
func (m *Manager) FillPool(ctx context.Context, s Spec, size int) (int, error) {
	key, err := PoolKey(s)
	if err != nil {
		return 0, err
	}
	c := m.Cluster
	pods, err := c.api.listPods(ctx, c.Namespace, metav1.ListOptions{LabelSelector: m.poolSelector(key)})
	if err != nil {
		return 0, apiError("list pool pods in "+c.Namespace, err)
	}
	alive := 0
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && podFailure(p) == nil {
			alive++
		}
	}
	made := 0
	for ; alive+made < size; made++ {
		ps := s
		var b [6]byte
		rand.Read(b[:])
		ps.ID, ps.Task, ps.Created = "pool-"+hex.EncodeToString(b[:]), "", time.Time{}
		if err := m.prepare(&ps); err != nil {
			return made, err
		}
		pod, err := Pod(ps)
		if err != nil {
			return made, err
		}
		pod.Name = "vak-pool-" + hex.EncodeToString(b[:])
		pod.Labels[LabelKind], pod.Labels[LabelPoolKey], pod.Labels[LabelPod] = KindPool, key, pod.Name
		delete(pod.Labels, LabelTask)
		if err := m.createPod(ctx, ps, pod); err != nil {
			return made, err
		}
	}
	return made, nil
}

// claim takes a pool pod for s (the oldest that is not failing) and
// returns its name, or "" when none fits or the manager has no pool.
func (m *Manager) claim(ctx context.Context, s Spec) string {
	if !m.Pool {
		return ""
	}
	key, err := PoolKey(s)
	if err != nil {
		return ""
	}
	c := m.Cluster
	pods, err := c.api.listPods(ctx, c.Namespace, metav1.ListOptions{LabelSelector: m.poolSelector(key)})
	if err != nil {
		m.progress("warning: the warm pool cannot be listed (a new pod instead): %v", err)
		return ""
	}
	items := pods.Items
	slices.SortFunc(items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for i := range items {
		if name, ok := m.claimPod(ctx, s, key, &items[i]); ok {
			return name
		}
	}
	return ""
}

// claimPod relabels pool pod p as s's session. The update carries the
// pod's resource version: when the pod changed meanwhile (the kubelet
// updates its status as it starts) it is read again and, if it is still
// in the pool, tried again; a pod another create claimed is not.
func (m *Manager) claimPod(ctx context.Context, s Spec, key string, p *corev1.Pod) (string, bool) {
	c := m.Cluster
	for range 10 {
		if p.DeletionTimestamp != nil || podFailure(p) != nil || p.Annotations[AnnotationHostID] != s.HostID ||
			p.Labels[LabelKind] != KindPool || p.Labels[LabelPoolKey] != key {
			return "", false
		}
		for k, v := range podLabels(s) {
			if k != LabelPod {
				p.Labels[k] = v
			}
		}
		delete(p.Labels, LabelPoolKey)
		p.Annotations[AnnotationCreated] = s.Created.UTC().Format(time.RFC3339)
		if s.OwnerProc != "" {
			p.Annotations[AnnotationOwnerProc] = s.OwnerProc
		}
		err := c.api.core.Put().Namespace(c.Namespace).Resource("pods").Name(p.Name).Body(p).Do(ctx).Error()
		switch {
		case err == nil:
			return p.Name, true
		case apierrors.IsConflict(err):
			if p, err = c.api.getPod(ctx, c.Namespace, p.Name); err != nil {
				return "", false
			}
		case apierrors.IsNotFound(err):
			return "", false
		default:
			m.progress("warning: claiming %s/%s: %v (a new pod instead)", c.Namespace, p.Name, err)
			return "", false
		}
	}
	return "", false
}

// poolGC removes this host's pool pods that ended (their lifetime, a
// failure): they can never be claimed.
func (m *Manager) poolGC(ctx context.Context, host string) ([]Removed, error) {
	c := m.Cluster
	l := map[string]string{LabelManaged: "true", LabelKind: KindPool, LabelOwner: strconv.Itoa(os.Getuid())}
	maps.Copy(l, m.Labels)
	pods, err := c.api.listPods(ctx, c.Namespace, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(l).String()})
	if err != nil {
		return nil, apiError("list pool pods in "+c.Namespace, err)
	}
	var out []Removed
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Annotations[AnnotationHostID] != host {
			continue
		}
		ferr := podFailure(p)
		if ferr == nil {
			continue
		}
		rec := &record{ID: p.Labels[LabelSession], Namespace: p.Namespace, Pod: p.Name}
		if err := m.remove(ctx, rec); err != nil {
			return out, err
		}
		out = append(out, Removed{ID: rec.ID, Pod: p.Namespace + "/" + p.Name, Reason: fmt.Sprintf("a warm pod that cannot be claimed: %v", ferr)})
	}
	return out, nil
}
