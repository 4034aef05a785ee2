package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/leanstage"
	"vak/internal/testenv"
)

// leanTrace and vakTrace are the trace lines that say which program ran a
// landlock sandbox's stages (the landlock backend's useLeanStage).
const (
	leanTrace = "vak trace: worker program: the lean stage program "
	vakTrace  = "vak trace: worker program: vak itself ("
)

// A vak built as releases are (scripts/build-vak, as testenv.Vak builds
// it) starts its landlock stages with the lean stage program, and they
// hold: the command writes its workspace but not the repository's
// protected .git/config in it, nor the system's directories.
func TestRunLeanStageProgram(t *testing.T) {
	testenv.RequireLandlock(t)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"landlock\"\n")
	ws := tempWorkspace(t)
	gitConfig := filepath.Join(ws, ".git", "config")
	if err := os.MkdirAll(filepath.Dir(gitConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gitConfig, []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `echo in-sandbox; touch made
echo '[core] fsmonitor = /tmp/x' >> .git/config 2>/dev/null && echo ESCAPED-GIT
touch /usr/vak-lean-escape 2>/dev/null && echo ESCAPED-USR
true`
	cmd := exec.Command(testenv.Vak(t), "--config", cfg, "run", "--trace", "-w", ws, "--", "sh", "-c", script)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("vak run: %v\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), leanTrace) {
		t.Fatalf("the stages did not run the lean stage program; trace:\n%s", errb.String())
	}
	if _, err := os.Stat(filepath.Join(ws, "made")); err != nil || !strings.Contains(out.String(), "in-sandbox") {
		t.Fatalf("control: the command did not run or could not write its workspace (%v); stdout %q", err, out.String())
	}
	if b, _ := os.ReadFile(gitConfig); string(b) != "[core]\n" || strings.Contains(out.String(), "ESCAPED-GIT") {
		t.Fatalf("a command started by the lean stage program wrote the protected .git/config: %q", b)
	}
	if _, err := os.Stat("/usr/vak-lean-escape"); err == nil || strings.Contains(out.String(), "ESCAPED-USR") {
		os.Remove("/usr/vak-lean-escape")
		t.Fatal("a command started by the lean stage program wrote /usr")
	}
}

// In this process the broker runs whatever this test binary embeds:
// scripts/test builds it with the lean program (VAK_REQUIRE_LEANSTAGE=1),
// plain go test without; the trace says which.
func TestRunTraceNamesTheWorkerProgram(t *testing.T) {
	testenv.RequireLandlock(t)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"landlock\"\n")
	code, _, errs := vakMain(t, cfg, "run", "--trace", "-w", tempWorkspace(t), "--", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := vakTrace + leanstage.ErrNotEmbedded.Error()
	if leanstage.Embedded() > 0 {
		want = leanTrace
	} else if os.Getenv("VAK_REQUIRE_LEANSTAGE") == "1" {
		t.Fatal("VAK_REQUIRE_LEANSTAGE=1 but this test binary embeds no lean stage program")
	}
	if !strings.Contains(errs, want) {
		t.Fatalf("trace lacks %q:\n%s", want, errs)
	}
}
