package kubesession

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/remotecommand"
)

// podCheck says whether a pod has reached what a wait waits for.
type podCheck func(*corev1.Pod) bool

// syncRunning: the sync init container runs (the fence and the install
// are done), ready for the workspace.
func syncRunning(p *corev1.Pod) bool {
	st := containerStatus(p.Status.InitContainerStatuses, ContainerSync)
	return st != nil && st.State.Running != nil
}

// sessionRunning: the worker's container runs.
func sessionRunning(p *corev1.Pod) bool {
	st := containerStatus(p.Status.ContainerStatuses, ContainerSession)
	return st != nil && st.State.Running != nil
}

// waitPod watches pod name until ok accepts it, failing at once on a pod
// that cannot get there (podFailure) and, when ctx ends, saying what the
// pod was doing.
func (m *Manager) waitPod(ctx context.Context, name string, ok podCheck) (*corev1.Pod, error) {
	c := m.Cluster
	p, err := c.api.getPod(ctx, c.Namespace, name)
	if err != nil {
		return nil, apiError("get pod "+m.Cluster.Namespace+"/"+name, err)
	}
	for {
		if err := podFailure(p); err != nil {
			return nil, err
		}
		if ok(p) {
			return p, nil
		}
		w, err := c.api.watchPods(ctx, c.Namespace, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: p.ResourceVersion,
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, waitTimeout(name, p, ctx.Err())
			}
			return nil, apiError("watch pod "+m.Cluster.Namespace+"/"+name, err)
		}
		next, err := nextPod(ctx, w, p, ok)
		w.Stop()
		if err != nil {
			return nil, err
		}
		if next == nil {
			return nil, fmt.Errorf("%w: pod %s/%s was deleted while it started", ErrPodFailed, m.Cluster.Namespace, name)
		}
		if podFailure(next) != nil || ok(next) {
			p = next
			continue
		}
		// The watch ended (or its resource version expired): look again
		// after a pause, from a fresh version.
		select {
		case <-ctx.Done():
			return nil, waitTimeout(name, next, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if p, err = c.api.getPod(ctx, c.Namespace, name); err != nil {
			return nil, apiError("get pod "+c.Namespace+"/"+name, err)
		}
	}
}

// nextPod reads w until the pod fails, ok accepts it, it is deleted (nil)
// or the watch ends (the last pod seen, for a new watch).
func nextPod(ctx context.Context, w watch.Interface, last *corev1.Pod, ok podCheck) (*corev1.Pod, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, waitTimeout(last.Name, last, ctx.Err())
		case ev, open := <-w.ResultChan():
			if !open {
				return last, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, nil
			case watch.Error:
				return last, nil
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			last = p
			if podFailure(p) != nil || ok(p) {
				return p, nil
			}
		}
	}
}

// waitTimeout is the error of a wait that ran out of time: what the pod
// was doing (phase, unschedulable reason, waiting containers).
func waitTimeout(name string, p *corev1.Pod, cause error) error {
	var why []string
	why = append(why, "phase "+string(p.Status.Phase))
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionFalse && c.Message != "" {
			why = append(why, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, st := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := st.State.Waiting; w != nil && w.Reason != "" {
			why = append(why, fmt.Sprintf("container %s waiting: %s %s", st.Name, w.Reason, w.Message))
		}
	}
	return fmt.Errorf("%w: pod %s/%s did not start in time (%v): %s", ErrPodFailed, p.Namespace, name, cause, strings.Join(why, "; "))
}

// stuckReasons are container waiting reasons that do not resolve by
// waiting.
var stuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// podFailure is the error of a pod that will not start: an init container
// that failed (the fence's self-test, the install, the upload), an image
// that cannot be pulled, a pod that ended.
func podFailure(p *corev1.Pod) error {
	for _, st := range p.Status.InitContainerStatuses {
		t := st.State.Terminated
		if t == nil && st.RestartCount > 0 && p.Status.Phase == corev1.PodPending {
			// The proxied fence is a sidecar, restarted when it fails:
			// before the session runs, one failure is the answer.
			t = st.LastTerminationState.Terminated
		}
		if t != nil && t.ExitCode != 0 {
			return fmt.Errorf("%w: pod %s/%s: init container %s failed (exit %d, %s): %s", ErrPodFailed, p.Namespace, p.Name, st.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
		}
	}
	for _, st := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := st.State.Waiting; w != nil && stuckReasons[w.Reason] {
			return fmt.Errorf("%w: pod %s/%s: container %s cannot start (%s: %s)%s", ErrPodFailed, p.Namespace, p.Name, st.Name, w.Reason, w.Message, imageHint(st.Image, w.Reason))
		}
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return fmt.Errorf("%w: pod %s/%s is %s (%s)%s", ErrPodFailed, p.Namespace, p.Name, p.Status.Phase, p.Status.Reason+" "+p.Status.Message, containerEnd(p, ContainerSession))
	}
	return nil
}

// imageHint says how to get an image the cluster cannot pull onto it.
func imageHint(image, reason string) string {
	if !strings.Contains(reason, "Image") {
		return ""
	}
	if strings.HasPrefix(image, WorkerImageRepo+":") {
		return fmt.Sprintf(": the cluster does not have vak's worker image %s; write it with `vak session worker-image -o worker.tar` and load it onto the nodes (ctr -n k8s.io images import worker.tar), or push it to a registry the cluster pulls from and set kubernetes.worker_image", image)
	}
	return fmt.Sprintf(": the cluster cannot get image %s (kubernetes.pull_policy, the registry, or load it onto the nodes)", image)
}

// containerEnd describes how container name of p ended, if it did.
func containerEnd(p *corev1.Pod, name string) string {
	st := containerStatus(p.Status.ContainerStatuses, name)
	if st == nil || st.State.Terminated == nil {
		return ""
	}
	t := st.State.Terminated
	msg := strings.TrimSpace(t.Message)
	if msg != "" {
		msg = ": " + msg
	}
	return fmt.Sprintf("; container %s exited %d (%s)%s", name, t.ExitCode, t.Reason, msg)
}

// terminationMessage is the termination message of init container name.
func terminationMessage(p *corev1.Pod, name string) string {
	st := containerStatus(p.Status.InitContainerStatuses, name)
	if st == nil || st.State.Terminated == nil {
		return ""
	}
	return st.State.Terminated.Message
}

func containerStatus(list []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// apiError wraps an API error: one that says the cluster is unreachable
// wraps ErrCluster; the others keep their own message with what was done.
func apiError(what string, err error) error {
	var nerr net.Error
	var oerr *net.OpError
	switch {
	case errors.As(err, &oerr), errors.As(err, &nerr), apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err):
		return fmt.Errorf("%w: %s: %v", ErrCluster, what, err)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity"):
		return fmt.Errorf("%w: %s: the namespace's Pod Security level refuses it: a session pod's fence init container runs as root with NET_ADMIN (its only capability; the session container has none), which only the \"privileged\" level admits: label the namespace pod-security.kubernetes.io/enforce=privileged, or give sessions a namespace of their own (kubernetes.namespace): %v", ErrCluster, what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: %s: the cluster refused it (RBAC: the kubeconfig's user needs to create, get, watch and delete pods, pods/exec, pods/attach and networkpolicies in the namespace): %v", ErrCluster, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// streamOptions are a stream's options without a terminal.
func streamOptions(in io.Reader, out, errOut io.Writer) remotecommand.StreamOptions {
	return remotecommand.StreamOptions{Stdin: in, Stdout: out, Stderr: errOut}
}
