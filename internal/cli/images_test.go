package cli

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"vak/internal/testenv"
)

// loadImage `docker load`s a one-file image tagged tags, created at created
// and labelled labels: an image as old as wanted, without a registry.
func loadImage(t *testing.T, created time.Time, labels map[string]string, tags ...string) {
	t.Helper()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	body := []byte(tags[0] + "\n")
	lw.WriteHeader(&tar.Header{Name: "tag", Mode: 0o644, Size: int64(len(body)), ModTime: created})
	lw.Write(body)
	lw.Close()
	diff := sha256.Sum256(layer.Bytes())
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "created": created.UTC().Format(time.RFC3339),
		"config": map[string]any{"Labels": labels, "Cmd": []string{"/nothing"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": tags, "Layers": []string{"layer/layer.tar"}}})
	var img bytes.Buffer
	w := tar.NewWriter(&img)
	for _, f := range []struct {
		name string
		data []byte
	}{{cfgName, cfg}, {"layer/layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		w.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))})
		w.Write(f.data)
	}
	w.Close()
	cmd := exec.Command("docker", "load")
	cmd.Stdin = &img
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker load %v: %v: %s", tags, err, out)
	}
	t.Cleanup(func() { exec.Command("docker", append([]string{"rmi", "-f"}, tags...)...).Run() })
}

func imageExists(tag string) bool {
	return exec.Command("docker", "image", "inspect", tag).Run() == nil
}

// `vak gc --images` removes old vak-net/vak-dockerd images this vak does not
// use and keeps the young ones, the ones a container uses and every other
// repository's; --dry-run removes nothing. The test's own label confines it
// to the images it loaded (other tests' images are never touched).
func TestGCImages(t *testing.T) {
	testenv.RequireDocker(t)
	id := testenv.TestID(t) + strings.TrimPrefix(testenv.UniqueName("x"), "vaktest-x-")
	lbl := map[string]string{testenv.TestLabel: "1", "vak.test.imggc": id}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	stale := "vak-net:gctest-old-" + id
	staleSidecar := "vak-dockerd:gctest-old-" + id
	young := "vak-net:gctest-young-" + id
	used := "vak-net:gctest-used-" + id
	other := "vaktest-other:gctest-old-" + id
	loadImage(t, old, lbl, stale)
	loadImage(t, old, lbl, staleSidecar)
	loadImage(t, time.Now(), lbl, young)
	loadImage(t, old, lbl, used)
	loadImage(t, old, lbl, other)
	name := testenv.UniqueName("imggc")
	testenv.Docker(t, append(append([]string{"create", "--name", name}, testenv.LabelArgs(t)...), used)...)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })

	code, out, errs := vakMain(t, "", "gc", "--images", "--dry-run", "--label", "vak.test.imggc="+id)
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s%s", code, out, errs)
	}
	for _, want := range []string{"would remove " + stale, "would remove " + staleSidecar, "kept " + young + ": younger than 1h0m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	for _, tag := range []string{stale, staleSidecar, young, used, other} {
		if !imageExists(tag) {
			t.Fatalf("--dry-run removed %s", tag)
		}
	}

	code, out, errs = vakMain(t, "", "gc", "--images", "--label", "vak.test.imggc="+id)
	if code != 0 {
		t.Fatalf("gc --images: exit %d: %s%s", code, out, errs)
	}
	for _, want := range []string{"removed " + stale, "removed " + staleSidecar, "kept " + used + ": in use by a container", "kept " + young} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, other) {
		t.Errorf("gc --images looked at another repository's image:\n%s", out)
	}
	for tag, want := range map[string]bool{stale: false, staleSidecar: false, young: true, used: true, other: true} {
		if got := imageExists(tag); got != want {
			t.Errorf("%s exists = %v after gc --images, want %v", tag, got, want)
		}
	}
}

func TestGCImagesFlags(t *testing.T) {
	code, _, errs := vakMain(t, "", "gc", "--images", "--homes")
	if code != ExitUsage || !strings.Contains(errs, "--images cannot be combined") {
		t.Fatalf("--images --homes: exit %d: %s", code, errs)
	}
}
