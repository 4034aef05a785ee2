package kubesession

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"

	corev1 "k8s.io/api/core/v1"

	"vak/internal/worker/wire"
	"vak/internal/wsync"
)

// GatewayReceiptsDir is where the gateway pod's receipts logs are (its
// state directory's receipts/, on the pod's data volume: lost with the
// pod, so the host fetches them).
const GatewayReceiptsDir = GatewayDataDir + "/vak/receipts"

// FetchGatewayReceipts copies the receipts logs of each running gateway
// pod of the namespace into dest/POD/ (replacing an earlier copy of that
// pod's), packed in the pod by `vak __tar` and unpacked here with wsync's
// checks, and returns the pods it copied. The logs are signed with the key
// only the gateway and the host hold: `vak receipts ls` verifies the copy.
// A pod's logs copied while it writes may end in records its signature
// file does not yet cover; fetch again to see them verified.
func (m *Manager) FetchGatewayReceipts(ctx context.Context, dest string) ([]string, error) {
	c := m.Cluster
	pods, err := c.api.listPods(ctx, c.Namespace, metav1.ListOptions{LabelSelector: LabelKind + "=" + KindGateway + "," + LabelManaged + "=true"})
	if err != nil {
		return nil, apiError("list gateway pods in "+c.Namespace, err)
	}
	if err := os.MkdirAll(dest, 0o700); err != nil {
		return nil, err
	}
	var got []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		if err := m.fetchReceipts(ctx, p.Name, dest); err != nil {
			return got, err
		}
		got = append(got, p.Name)
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("%w: no running gateway pod in namespace %s (a proxied session deploys it)", ErrCluster, c.Namespace)
	}
	return got, nil
}

// fetchReceipts copies pod's receipts into dest/pod: unpacked beside it
// first, so a failed copy leaves the earlier one as it was.
func (m *Manager) fetchReceipts(ctx context.Context, pod, dest string) error {
	c := m.Cluster
	ex, err := c.executor(c.execRequest(pod, ContainerGateway, []string{imageVak, TarCommand, GatewayReceiptsDir}, false))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dest, ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	pr, pw := io.Pipe()
	stderr := wire.NewTailBuffer(4 << 10)
	go func() {
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: pw, Stderr: stderr})
		if err != nil {
			err = fmt.Errorf("%v %s", err, stderr.String())
		}
		pw.CloseWithError(err)
	}()
	_, err = wsync.Unpack(pr, tmp, wsync.UnpackOptions{MaxBytes: MaxSnapshotBytes})
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return fmt.Errorf("%w: copy the receipts of gateway pod %s/%s: %w", ErrCluster, c.Namespace, pod, err)
	}
	final := filepath.Join(dest, pod)
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}
