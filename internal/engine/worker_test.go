package engine_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"vak/internal/engine"
	"vak/internal/testenv"
)

func TestCheckWorkerBinary(t *testing.T) {
	vak := testenv.Vak(t)
	if err := engine.CheckWorkerBinary(vak, "amd64"); err != nil && strings.Contains(err.Error(), "dynamically") {
		t.Fatalf("static vak refused: %v", err)
	}
	// A dynamically linked binary (the host's own sh is).
	if dyn, err := exec.LookPath("ls"); err == nil {
		if err := engine.CheckWorkerBinary(dyn, ""); err != nil {
			if !errors.Is(err, engine.ErrWorkerBinary) || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
				t.Fatalf("dynamic binary: %v", err)
			}
		} else {
			t.Log("ls is static here; dynamic case not exercised")
		}
	}
	script := t.TempDir() + "/script"
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if err := engine.CheckWorkerBinary(script, ""); !errors.Is(err, engine.ErrWorkerBinary) {
		t.Fatalf("script: %v", err)
	}
	other := "arm64"
	if strings.Contains(fmt.Sprint(engine.CheckWorkerBinary(vak, "arm64")), "built for") == false {
		other = "amd64"
	}
	if err := engine.CheckWorkerBinary(vak, other); !errors.Is(err, engine.ErrWorkerBinary) {
		t.Fatalf("arch mismatch accepted for %s", other)
	}
	if err := engine.CheckRunnableBy(script, 4242, 4343); err != nil {
		t.Fatalf("0755 file: %v", err)
	}
	os.Chmod(script, 0o700)
	if err := engine.CheckRunnableBy(script, 4242, 4343); !errors.Is(err, engine.ErrWorkerBinary) {
		t.Fatalf("0700 file runnable by another user: %v", err)
	}
}
