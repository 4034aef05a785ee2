package proxynet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// poolDirs lists the warm pool's key directories and their entries.
func (e *dindEnv) poolDirs() map[string][]string {
	root := filepath.Join(e.xdg, "vak", "sessions", "pool")
	out := map[string][]string{}
	dirs, _ := os.ReadDir(root)
	for _, d := range dirs {
		ents, _ := os.ReadDir(filepath.Join(root, d.Name()))
		for _, f := range ents {
			if strings.HasSuffix(f.Name(), ".json") {
				out[filepath.Join(root, d.Name())] = append(out[filepath.Join(root, d.Name())], f.Name())
			}
		}
	}
	return out
}

// fill runs `vak session pool fill --docker` for workspace ws with cfg and
// returns the pool directory that gained an entry.
func (e *dindEnv) fill(cfg, ws string) string {
	t := e.t
	t.Helper()
	before := e.poolDirs()
	out, errs, err := e.vakCmd(cfg, append(append([]string{"session", "pool", "fill"}, e.labels...), "-w", ws, "--network", "proxied", "--docker")...)
	if err != nil || strings.TrimSpace(out) != "started 1" {
		t.Fatalf("pool fill --docker in %s: %v\n%s%s", ws, err, out, errs)
	}
	for d, ents := range e.poolDirs() {
		if len(ents) > len(before[d]) {
			return d
		}
	}
	t.Fatalf("pool fill made no pool entry: %v", e.poolDirs())
	return ""
}

// entrySlot is the docker slot of the (only) pool entry in dir.
func entrySlot(t *testing.T, dir string) (file, slot string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, f := range ents {
		if strings.HasSuffix(f.Name(), ".json") {
			data, err := os.ReadFile(filepath.Join(dir, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			_, rest, _ := strings.Cut(string(data), `"docker_slot": "`)
			slot, _, _ = strings.Cut(rest, `"`)
			return filepath.Join(dir, f.Name()), slot
		}
	}
	t.Fatalf("no pool entry in %s", dir)
	return "", ""
}

// gone reports whether nothing of docker slot key is left on the host
// daemon (container or volume labelled with it).
func slotGone(t *testing.T, key string) bool {
	t.Helper()
	for _, kind := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}} {
		if out := testenv.Docker(t, append(kind, "--filter", "label=vak.session="+key)...); strings.TrimSpace(out) != "" {
			return false
		}
	}
	return true
}

// The warm pool of --docker pairs, through the CLI: a claimed session's
// inner objects carry its pool slot as owner label, `vak session rm`
// removes the pair; a pair whose sidecar died is not claimed (the create
// warns, removes it and starts cold); and a pair made for another
// workspace, or for the same workspace with other guard variables
// (propagated placeholders), is never claimed: each has its own pool key,
// and an entry filed under the wrong key (moved there by hand) is refused
// by the claim's check of the sidecar against a cold create's (the
// warning names the difference) and removed, and the create starts cold.
func TestDockerPoolPairs(t *testing.T) {
	e := newDindEnvPool(t)
	wsB, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(filepath.Dir(e.ws), "wsB")))
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(wsB, 0o777)
	t.Cleanup(func() {
		if cli, err := engine.New(); err == nil {
			Teardown(context.Background(), cli, filepath.Join(e.xdg, "vak"), wsB, true)
		}
	})
	create := func(cfg, ws, task string) (id, warnings string) {
		t.Helper()
		out, errs, err := e.vakCmd(cfg, append(append([]string{"session", "create"}, e.labels...), "-w", ws, "--task", task, "--network", "proxied", "--docker", "--no-refill")...)
		if err != nil {
			t.Fatalf("session create --docker in %s: %v\n%s", ws, err, errs)
		}
		id = strings.TrimSpace(out)
		slot := e.slot(id)
		t.Cleanup(func() {
			e.vakCmd(cfg, append(append([]string{"session", "rm"}, e.labels...), id)...)
			dockerOut("rm", "-f", taskenv.SidecarPrefix+slot, taskenv.SessionPrefix+id)
			dockerOut("volume", "rm", "-f", taskenv.SidecarPrefix+slot+"-lib", taskenv.SidecarPrefix+slot+"-sock")
		})
		return id, errs
	}

	id := e.session(e.cfg, "claim") // fails unless claimed
	t.Run("ClaimedPair", func(t *testing.T) {
		slot := e.slot(id)
		if out, err := e.exec(id, "docker run --rm "+e.base+" probe tls https://allowed.test/status/200"); err != nil || !strings.HasPrefix(out, "OK 200") {
			t.Errorf("inner egress of a claimed session: %v\n%s", err, out)
		}
		// Inner objects carry the pool slot as owner label.
		out, err := e.exec(id, `docker network create vaktest-pool-net >/dev/null && docker network inspect -f '{{index .Labels "vak.session"}}' vaktest-pool-net && docker volume create vaktest-pool-vol >/dev/null && docker volume inspect -f '{{index .Labels "vak.session"}}' vaktest-pool-vol`)
		if err != nil || strings.Fields(out)[0] != slot || strings.Fields(out)[len(strings.Fields(out))-1] != slot {
			t.Errorf("inner network and volume labels: %v %q, want %s", err, out, slot)
		}
		if _, errs, err := e.vakCmd(e.cfg, append(append([]string{"session", "rm"}, e.labels...), id)...); err != nil {
			t.Fatalf("session rm: %v %s", err, errs)
		}
		if !slotGone(t, slot) {
			t.Errorf("session rm left containers or volumes of slot %s", slot)
		}
	})

	t.Run("DeadPairNotClaimed", func(t *testing.T) {
		dir := e.fill(e.cfg, e.ws)
		_, slot := entrySlot(t, dir)
		testenv.Docker(t, "kill", taskenv.SidecarPrefix+slot)
		id, warn := create(e.cfg, e.ws, "afterdead")
		if got := e.slot(id); got != id {
			t.Errorf("a create claimed a pair whose sidecar is dead (slot %s)", got)
		}
		if !strings.Contains(warn, "not claimed") || !strings.Contains(warn, taskenv.SidecarPrefix+slot) {
			t.Errorf("no warning naming the dead pair:\n%s", warn)
		}
		if !slotGone(t, slot) {
			t.Errorf("the dead pair of slot %s was not removed", slot)
		}
	})

	// The sidecar runs but its guard does not answer (killed inside the
	// sidecar; dockerd, PID 1, goes on): the claim's `docker info` through
	// the guard, asked from inside the session, refuses the pair.
	t.Run("DeadGuardNotClaimed", func(t *testing.T) {
		dir := e.fill(e.cfg, e.ws)
		_, slot := entrySlot(t, dir)
		testenv.Docker(t, "exec", taskenv.SidecarPrefix+slot, "sh", "-c",
			`for p in /proc/[0-9]*; do [ "$(readlink $p/exe)" = /opt/vak/vak ] && kill ${p#/proc/}; done; true`)
		if st, _ := dockerOut("inspect", "-f", "{{.State.Running}}", taskenv.SidecarPrefix+slot); strings.TrimSpace(st) != "true" {
			t.Fatalf("the sidecar stopped with its guard (running %q): this case needs it running", st)
		}
		id, warn := create(e.cfg, e.ws, "afterguard")
		if got := e.slot(id); got != id {
			t.Errorf("a create claimed a pair whose guard is dead (slot %s)", got)
		}
		if !strings.Contains(warn, "not claimed") || !strings.Contains(warn, taskenv.SidecarPrefix+slot) || !strings.Contains(warn, "docker info through the guard") {
			t.Errorf("no warning naming the pair and its guard:\n%s", warn)
		}
		if !slotGone(t, slot) {
			t.Errorf("the pair of slot %s with a dead guard was not removed", slot)
		}
	})

	t.Run("ForeignPairsNeverClaimed", func(t *testing.T) {
		dA := e.fill(e.cfg, e.ws)
		dB := e.fill(e.cfg, wsB)
		dP := e.fill(e.cfgProp, e.ws)
		if dA == dB || dA == dP || dB == dP {
			t.Fatalf("pool keys: workspace A %s, workspace B %s, A with propagated placeholders %s: want three", dA, dB, dP)
		}
		fA, slotA := entrySlot(t, dA)
		fB, slotB := entrySlot(t, dB)
		fP, slotP := entrySlot(t, dP)
		// Without tampering, another key is never looked at: the config
		// that propagates nothing does not claim the propagating pair, and
		// B's pair stays B's (checked below by claiming it from B).
		// Misfiled entries: A's pair under B's key, B's and the
		// propagating pair under A's key.
		for _, mv := range [][2]string{{fA, filepath.Join(dB, "a.json")}, {fB, filepath.Join(dA, "b.json")}, {fP, filepath.Join(dA, "p.json")}} {
			if err := os.Rename(mv[0], mv[1]); err != nil {
				t.Fatal(err)
			}
		}
		// A create in A with cfg meets B's pair and the propagating one.
		id, warn := create(e.cfg, e.ws, "foreign-a")
		if got := e.slot(id); got != id {
			t.Errorf("a create in workspace A claimed pair %s", got)
		}
		for _, slot := range []string{slotB, slotP} {
			if !strings.Contains(warn, taskenv.SidecarPrefix+slot) || !slotGone(t, slot) {
				t.Errorf("pair %s misfiled under A's key: not refused by name or not removed:\n%s", slot, warn)
			}
		}
		if !strings.Contains(warn, "--workspace") || !strings.Contains(warn, wsB) {
			t.Errorf("the refusal does not name the workspace that differs:\n%s", warn)
		}
		if !strings.Contains(warn, "TOKEN=") {
			t.Errorf("the refusal of the propagating pair does not name the variable:\n%s", warn)
		}
		// A create in B meets A's pair.
		id, warn = create(e.cfg, wsB, "foreign-b")
		if got := e.slot(id); got != id || !strings.Contains(warn, taskenv.SidecarPrefix+slotA) || !slotGone(t, slotA) {
			t.Errorf("a create in workspace B with A's pair under its key: slot %s\n%s", got, warn)
		}
		// Control: a pair filed under its own key is claimed.
		e.fill(e.cfg, wsB)
		id, warn = create(e.cfg, wsB, "own-b")
		if got := e.slot(id); !strings.HasPrefix(got, taskenv.PoolSlotPrefix) {
			t.Errorf("control: B's own pair was not claimed (slot %s)\n%s", got, warn)
		}
		if left := e.poolDirs(); len(left) != 0 {
			t.Errorf("pool entries left: %v", left)
		}
	})
	if out, err := exec.Command("docker", "ps", "-a", "--filter", "name=^"+taskenv.SidecarPrefix+taskenv.PoolSlotPrefix, "--filter", "label="+testenv.TestIDLabel+"="+testenv.TestID(t), "--format", "{{.Names}}").CombinedOutput(); err == nil {
		t.Logf("pool sidecars of this test still there (removed by cleanup): %s", slices.Compact(strings.Fields(string(out))))
	}
}
