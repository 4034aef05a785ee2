package kubesession

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"vak/internal/engine"
)

// WorkerImageRepo is the repository of the worker image vak writes for
// itself; its tag is a digest of the binary, so a pod's vak is the host's.
const WorkerImageRepo = "vak.local/worker"

// WorkerImageTag is the worker image reference for the vak binary at path.
func WorkerImageTag(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("worker image: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("worker image: read %s: %w", path, err)
	}
	return WorkerImageRepo + ":" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// WriteWorkerImage writes the worker image of the static Linux vak binary
// at path to w, as a `docker save` archive (one layer holding /vak, no
// shell, no package manager) that `docker load`, `ctr images import` and
// registries' tools (`skopeo copy docker-archive:...`) accept, and returns
// its reference (WorkerImageTag). A dynamically linked vak is refused
// (engine.CheckWorkerBinary): the image has no C library.
func WriteWorkerImage(w io.Writer, path string) (string, error) {
	if err := engine.CheckWorkerBinary(path, runtime.GOARCH); err != nil {
		return "", err
	}
	ref, err := WorkerImageTag(path)
	if err != nil {
		return "", err
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("worker image: %w", err)
	}
	epoch := time.Unix(0, 0).UTC()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "vak", Mode: 0o555, Size: int64(len(bin)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if _, err := lw.Write(bin); err != nil {
		return "", err
	}
	if err := lw.Close(); err != nil {
		return "", err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(layerSum[:])
	cfg, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": []string{imageVak}, "User": "65534:65534"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}},
		"history":      []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "vak session worker-image"}},
	})
	if err != nil {
		return "", err
	}
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{layerHex + "/layer.tar"},
	}})
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{{layerHex + "/layer.tar", layer.Bytes()}, {cfgName, cfg}, {"manifest.json", manifest}}
	if err := tw.WriteHeader(&tar.Header{Name: layerHex + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
		return "", fmt.Errorf("worker image: %w", err)
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return "", fmt.Errorf("worker image: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", fmt.Errorf("worker image: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("worker image: %w", err)
	}
	return ref, nil
}

// WriteWorkerImageFile writes the worker image of the vak binary at exe
// to the file out (removed again if writing fails), or to w when out is ""
// or "-"; it returns the image's reference.
func WriteWorkerImageFile(out string, w io.Writer, exe string) (string, error) {
	var f *os.File
	if out != "" && out != "-" {
		var err error
		if f, err = os.Create(out); err != nil {
			return "", fmt.Errorf("worker image: %w", err)
		}
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	ref, err := WriteWorkerImage(bw, exe)
	if err == nil {
		err = bw.Flush()
	}
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(out)
		}
	}
	return ref, err
}
