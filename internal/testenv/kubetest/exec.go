package kubetest

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// Exec runs cmd in a container of pod (in e's namespace) through the exec
// subresource, over WebSocket (falling back to SPDY on servers without it),
// and returns what it wrote. A non-zero exit is an error that
// k8s.io/client-go/util/exec.CodeExitError matches.
func (e *Env) Exec(ctx context.Context, pod, container string, cmd []string) (stdout, stderr string, err error) {
	req := e.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.Namespace).
		Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(e.Config, "GET", req.URL().String())
	if err != nil {
		return "", "", fmt.Errorf("websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.Config, "POST", req.URL())
	if err != nil {
		return "", "", fmt.Errorf("spdy executor: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", "", fmt.Errorf("exec executor: %w", err)
	}
	var out, errOut bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	if err != nil {
		err = fmt.Errorf("exec %q in %s/%s: %w", cmd, e.Namespace, pod, err)
	}
	return out.String(), errOut.String(), err
}
