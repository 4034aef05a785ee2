package proxynet

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"vak/internal/engine"
	"vak/internal/testenv"
)

func TestEnsureImage(t *testing.T) {
	testenv.RequireDocker(t)
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	bin := testenv.Vak(t)
	data, _ := os.ReadFile(bin)
	tag := ImageTag(data)
	ctx := context.Background()
	var progress bytes.Buffer
	got, err := EnsureImage(ctx, cli, bin, &progress)
	if err != nil || got != tag {
		t.Fatalf("EnsureImage = %q, %v (want %q)\n%s", got, err, tag, progress.String())
	}
	// The image holds only the binary and runs it.
	out, err := exec.Command("docker", "run", "--rm", "--label", testenv.TestLabel+"=1", tag, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "vak ") {
		t.Fatalf("vak in the image: %v %s", err, out)
	}
	// Same binary: no rebuild, no progress.
	progress.Reset()
	if got, err := EnsureImage(ctx, cli, bin, &progress); err != nil || got != tag || progress.Len() != 0 {
		t.Fatalf("second EnsureImage rebuilt: %q %v %q", got, err, progress.String())
	}
	// A dynamically linked binary is refused with a clear error.
	if _, err := EnsureImage(ctx, cli, "/bin/sh", nil); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("dynamic binary: %v", err)
	}
}
