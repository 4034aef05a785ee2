package kubesession

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"vak/internal/worker/wire"
)

// executor is a stream to a pod's container: the exec or attach
// subresource over WebSocket, falling back to SPDY on servers without it.
func (c *Cluster) executor(req *rest.Request) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("%w: websocket executor: %v", ErrCluster, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("%w: spdy executor: %v", ErrCluster, err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
}

// execURL is the exec subresource request of cmd in pod's container.
func (c *Cluster) execRequest(pod, container string, cmd []string, stdin bool) *rest.Request {
	return c.api.podRequest(c.Namespace, pod, "exec",
		&corev1.PodExecOptions{Container: container, Command: cmd, Stdin: stdin, Stdout: true, Stderr: true})
}

// attachRequest is the attach subresource request of pod's container.
func (c *Cluster) attachRequest(pod, container string) *rest.Request {
	return c.api.podRequest(c.Namespace, pod, "attach",
		&corev1.PodAttachOptions{Container: container, Stdin: true, Stdout: true, Stderr: true})
}

// relay is one exec stream of `vak __worker-relay` in a session pod: the
// worker protocol's connection.
type relay struct {
	client *wire.Client
	cancel context.CancelFunc
	done   chan struct{}
	stderr *wire.TailBuffer
	err    error // the stream's end, once done is closed
}

// openRelay starts the relay in pod's session container and returns the
// protocol client on it (not yet ready: the caller waits for the worker's
// ready event). The stream lives until Close or until it breaks.
func (c *Cluster) openRelay(pod string) (*relay, error) {
	ex, err := c.executor(c.execRequest(pod, ContainerSession, []string{Worker, "__worker-relay", Socket}, true))
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	r := &relay{cancel: cancel, done: make(chan struct{}), stderr: wire.NewTailBuffer(4 << 10)}
	go func() {
		defer close(r.done)
		r.err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: r.stderr})
		err := r.err
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	r.client = wire.NewClient(inW, outR)
	return r, nil
}

// describe says how the stream ended, for errors.
func (r *relay) describe() string {
	select {
	case <-r.done:
	default:
		return "the stream is open"
	}
	msg := "the stream ended"
	if r.err != nil {
		msg = fmt.Sprintf("the stream ended: %v", r.err)
	}
	if t := r.stderr.String(); t != "" {
		msg += " (relay: " + t + ")"
	}
	return msg
}

// Close ends the stream: the sending half first (answers in flight
// arrive), then the stream itself.
func (r *relay) Close(ctx context.Context) {
	stop := context.AfterFunc(ctx, r.cancel)
	defer stop()
	r.client.Close(ctx)
	r.cancel()
	<-r.done
}
