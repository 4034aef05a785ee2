package proxynet

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"vak/internal/engine"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// ImageRepo is the repository of the gateway/netclient image.
const ImageRepo = "vak-net"

// LabelImageSource records which binary an image was built from.
const LabelImageSource = "vak.image.source"

// ImageTag is the content-derived tag for a vak binary: the same binary
// always maps to the same tag, so an existing image is reused as is.
func ImageTag(binary []byte) string {
	sum := sha256.Sum256(binary)
	return ImageRepo + ":" + hex.EncodeToString(sum[:8])
}

// EnsureImage builds (or finds) the image that runs the gateway and the
// netclient: FROM scratch + the static vak binary at /vak, nothing else.
// Build progress goes to progress (may be nil). It returns the tag.
func EnsureImage(ctx context.Context, cli *client.Client, binaryPath string, progress io.Writer) (string, error) {
	if err := engine.CheckWorkerBinary(binaryPath, ""); err != nil {
		return "", fmt.Errorf("proxynet: the gateway image needs a static Linux vak: %w", err)
	}
	bin, err := os.ReadFile(binaryPath)
	if err != nil {
		return "", fmt.Errorf("proxynet: read vak binary: %w", err)
	}
	tag := ImageTag(bin)
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("proxynet: inspect %s: %w", tag, err)
	}
	if progress != nil {
		fmt.Fprintf(progress, "vak: building %s from %s (%d MiB)\n", tag, binaryPath, len(bin)>>20)
	}
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	dockerfile := []byte("FROM scratch\nCOPY vak /vak\nENTRYPOINT [\"/vak\"]\n")
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, dockerfile}, {"vak", 0o755, bin}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return "", err
		}
		tw.Write(f.data)
	}
	tw.Close()
	res, err := cli.ImageBuild(ctx, &ctxTar, client.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{engine.LabelManaged: "true", LabelImageSource: tag},
	})
	if err != nil {
		return "", fmt.Errorf("proxynet: build %s: %w", tag, err)
	}
	defer res.Body.Close()
	if err := followBuild(res.Body, progress); err != nil {
		return "", fmt.Errorf("proxynet: build %s: %w", tag, err)
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		return "", fmt.Errorf("proxynet: build %s finished but the image is missing: %w", tag, err)
	}
	return tag, nil
}

// followBuild relays the daemon's build messages and returns its error.
func followBuild(r io.Reader, progress io.Writer) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Stream      string `json:"stream"`
			Status      string `json:"status"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
		if progress != nil {
			if s := strings.TrimRight(m.Stream+m.Status, "\n"); s != "" {
				fmt.Fprintf(progress, "vak:   %s\n", s)
			}
		}
	}
}
