// Command session measures session-scoped task environments side by side
// with what a user would do with Docker alone, interleaved in one run so
// drift hits every contender:
//
//   - exec latency of `true` in a running session: the library API over the
//     attached stdio and over the session socket, `vak session exec ID --
//     true` as a whole process, and `docker exec CONTAINER true`;
//
//   - create to first exec: cold (Manager.Create + Exec), from the warm pool,
//     and `docker run --rm IMAGE true`;
//
//   - snapshot of a session with a 100 MB change (and `docker commit` of the
//     same change), a snapshot cache hit, and a create from the snapshot key.
//
//     go run ./bench/session -n 200 -n-create 30 -n-snap 5
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"vak/bench/internal/stats"
	"vak/internal/taskenv"
)

var labels = map[string]string{"vak.bench": "session"}

func main() {
	n := flag.Int("n", 200, "exec samples per contender")
	nCreate := flag.Int("n-create", 30, "create samples per contender")
	nSnap := flag.Int("n-snap", 5, "snapshot samples")
	image := flag.String("image", "vak-test:latest", "image")
	files := flag.Int("files", 0, "fill the workspace with this many files (and a .git directory) first")
	flag.Parse()
	ctx := context.Background()

	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(filepath.Dir(vak))
	state, _ := os.MkdirTemp("", "vak-bench-state-")
	defer os.RemoveAll(state)
	os.Setenv("XDG_STATE_HOME", state) // the vak CLI and the manager share it
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	ws, _ := os.MkdirTemp(tmp, "vak-bench-ws-")
	defer os.RemoveAll(ws)
	if *files > 0 {
		must(stats.Fill(ws, *files))
		fmt.Printf("The workspace holds %d files (`-files`).\n\n", *files)
	}
	m := &taskenv.Manager{Worker: vak, Labels: labels}
	defer cleanup(m)

	fmt.Printf("### Sessions (%s/%s, %d cores, image %s, interleaved)\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), *image)

	// 1. Exec latency.
	s, err := m.Create(ctx, taskenv.Spec{Task: "exec", Workspace: ws, BaseImage: *image})
	must(err)
	sock, err := m.Open(ctx, s.ID())
	must(err)
	apiStdio := &stats.Sample{Name: "library API, attached stdio"}
	apiSocket := &stats.Sample{Name: "library API, session socket"}
	vakExec := &stats.Sample{Name: "`vak session exec ID -- true` (process)"}
	dockerExec := &stats.Sample{Name: "`docker exec CTR true` (process)"}
	true_ := taskenv.Command{Argv: []string{"true"}}
	for i := -5; i < *n; i++ {
		d1 := stats.MustTime(func() error { _, err := s.Exec(ctx, true_); return err })
		d2 := stats.MustTime(func() error { _, err := sock.Exec(ctx, true_); return err })
		d3 := stats.MustTime(func() error { return stats.RunQuiet(vak, "session", "exec", s.ID(), "--", "true") })
		d4 := stats.MustTime(func() error { return stats.RunQuiet("docker", "exec", s.Container(), "true") })
		if i >= 0 {
			apiStdio.Add(d1)
			apiSocket.Add(d2)
			vakExec.Add(d3)
			dockerExec.Add(d4)
		}
	}
	fmt.Printf("#### exec latency of `true` in a running session (n=%d)\n\n", *n)
	fmt.Print(stats.Table(dockerExec, vakExec, apiStdio, apiSocket))
	fmt.Println()
	sock.Close()
	must(s.Discard(ctx))

	if *nCreate > 0 {
		createToExec(ctx, m, vak, ws, *image, *nCreate, true_)
	}
	if *nSnap > 0 {
		snapshots(ctx, m, ws, *image, *nSnap)
	}
}

// createToExec measures create to first exec (2).
func createToExec(ctx context.Context, m *taskenv.Manager, vak, ws, image string, nCreate int, true_ taskenv.Command) {
	// 2. Create to first exec.
	cold := &stats.Sample{Name: "session create + first exec (cold)"}
	warm := &stats.Sample{Name: "session create + first exec (warm pool)"}
	run := &stats.Sample{Name: "`docker run --rm --network none IMAGE true`"}
	pooled := &taskenv.Manager{Worker: vak, Labels: labels, PoolSize: 1}
	defer cleanup(pooled)
	spec := taskenv.Spec{Workspace: ws, BaseImage: image}
	for i := -2; i < nCreate; i++ {
		spec.Task = fmt.Sprintf("cold%d", i+2)
		var cs *taskenv.Session
		d1 := stats.MustTime(func() error {
			var err error
			if cs, err = m.Create(ctx, spec); err == nil {
				_, err = cs.Exec(ctx, true_)
			}
			return err
		})
		must(cs.Discard(ctx))
		spec.Task = fmt.Sprintf("warm%d", i+2)
		_, err := pooled.FillPool(ctx, spec)
		must(err)
		time.Sleep(50 * time.Millisecond) // let the pooled worker's shims start
		var ws *taskenv.Session
		d2 := stats.MustTime(func() error {
			var err error
			if ws, err = pooled.Create(ctx, spec); err == nil {
				_, err = ws.Exec(ctx, true_)
			}
			return err
		})
		must(ws.Discard(ctx))
		d3 := stats.MustTime(func() error {
			return stats.RunQuiet("docker", "run", "--rm", "--network", "none", "--label", "vak.bench=session", image, "true")
		})
		if i >= 0 {
			cold.Add(d1)
			warm.Add(d2)
			run.Add(d3)
		}
	}
	fmt.Printf("#### create to first exec (n=%d)\n\n", nCreate)
	fmt.Print(stats.Table(run, cold, warm))
	fmt.Println()
}

// snapshots measures snapshots (3).
func snapshots(ctx context.Context, m *taskenv.Manager, ws, image string, nSnap int) {
	true_ := taskenv.Command{Argv: []string{"true"}}
	spec := taskenv.Spec{Workspace: ws, BaseImage: image}
	// 3. Snapshots.
	snap := &stats.Sample{Name: "Snapshot, 100 MB change (commit)"}
	commit := &stats.Sample{Name: "`docker commit`, same 100 MB change"}
	hit := &stats.Sample{Name: "Snapshot, cache hit (same key)"}
	fromKey := &stats.Sample{Name: "create --from KEY + first exec"}
	for i := 0; i < nSnap; i++ {
		spec.Task = fmt.Sprintf("snap%d", i)
		ss, err := m.Create(ctx, spec)
		must(err)
		res, err := ss.Exec(ctx, taskenv.Command{Argv: []string{"sh", "-c", "head -c 104857600 /dev/urandom > $HOME/blob && cp $HOME/blob /tmp/blob2"}})
		must(err)
		if res.ExitCode != 0 {
			log.Fatalf("write 100 MB: %+v", res)
		}
		man := taskenv.Manifest{"bench": fmt.Sprint(time.Now().UnixNano())}
		var ref *taskenv.ImageRef
		snap.Add(stats.MustTime(func() error { var err error; ref, err = m.Snapshot(ctx, ss.ID(), man); return err }))
		hit.Add(stats.MustTime(func() error {
			r, err := m.Snapshot(ctx, ss.ID(), man)
			if err == nil && !r.Cached {
				err = fmt.Errorf("not a cache hit")
			}
			return err
		}))
		var cid string
		commit.Add(stats.MustTime(func() error {
			out, err := exec.Command("docker", "commit", "-c", "LABEL vak.bench=session", ss.Container()).Output()
			cid = strings.TrimSpace(string(out))
			return err
		}))
		exec.Command("docker", "rmi", "-f", cid).Run()
		spec.Task = fmt.Sprintf("from%d", i)
		spec.BaseImage = ref.Ref
		var fs *taskenv.Session
		fromKey.Add(stats.MustTime(func() error {
			var err error
			if fs, err = m.Create(ctx, spec); err == nil {
				_, err = fs.Exec(ctx, true_)
			}
			return err
		}))
		spec.BaseImage = image
		must(fs.Discard(ctx))
		must(ss.Discard(ctx))
		must(m.RemoveSnapshot(ctx, ref.Key))
	}
	fmt.Printf("#### snapshots (n=%d)\n\n", nSnap)
	fmt.Print(stats.Table(commit, snap, hit, fromKey))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// cleanup removes every session of the bench.
func cleanup(m *taskenv.Manager) {
	ctx := context.Background()
	list, _ := m.List(ctx)
	for _, s := range list {
		if s.ID != "" {
			m.Discard(ctx, s.ID)
		} else {
			exec.Command("docker", "rm", "-f", s.Container).Run()
		}
	}
	m.GC(ctx)
	exec.Command("sh", "-c", "docker ps -aq --filter label=vak.bench=session | xargs -r docker rm -f >/dev/null 2>&1").Run()
}
