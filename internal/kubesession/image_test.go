package kubesession

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"vak/internal/engine"
	"vak/internal/testenv"
)

// TestWorkerImage writes the worker image of a static vak and checks the
// archive, then loads it into the real Docker Engine and runs it: the
// format is the one `docker save` writes, so container runtimes and
// registry tools take it.
func TestWorkerImage(t *testing.T) {
	vak := testenv.Vak(t)
	var b bytes.Buffer
	ref, err := WriteWorkerImage(&b, vak)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := WorkerImageTag(vak)
	if ref != want || !strings.HasPrefix(ref, WorkerImageRepo+":") {
		t.Fatalf("ref %q, tag %q", ref, want)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	var man []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &man); err != nil || len(man) != 1 || len(man[0].Layers) != 1 || man[0].RepoTags[0] != ref {
		t.Fatalf("manifest %s: %v", files["manifest.json"], err)
	}
	lr := tar.NewReader(bytes.NewReader(files[man[0].Layers[0]]))
	h, err := lr.Next()
	if err != nil || h.Name != "vak" || h.Mode != 0o555 {
		t.Fatalf("layer entry %+v: %v", h, err)
	}
	if _, err := lr.Next(); err != io.EOF {
		t.Fatalf("the layer holds more than vak: %v", err)
	}

	// A dynamically linked binary is refused.
	if _, err := WriteWorkerImage(io.Discard, "/bin/sh"); !errors.Is(err, engine.ErrWorkerBinary) {
		t.Errorf("WriteWorkerImage(/bin/sh): %v, want ErrWorkerBinary", err)
	}

	testenv.RequireDocker(t)
	load := exec.Command("docker", "load")
	load.Stdin = bytes.NewReader(b.Bytes())
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("docker load: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", ref).Run() })
	out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--label", testenv.TestLabel+"=1", ref, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "vak") {
		t.Fatalf("docker run %s version: %v: %s", ref, err, out)
	}
}
