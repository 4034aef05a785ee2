package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"vak/internal/fsguard"
	"vak/internal/paths"
	"vak/internal/worker/wire"
)

// The tripwire with a Watch (a worker's) removes, reports and clears
// exactly what it does with a walk around every command (the positive
// control: each step's removal is asserted on the walking worker too),
// over commands that plant .git entries in directories they create in one
// go, move them in from elsewhere, replace a repository's .git, rename a
// directory holding one, and set the setuid bit (directly, through a hard
// link inside .git, through a descriptor whose name is gone).
func TestTripwireWatchMatchesWalk(t *testing.T) {
	steps := []struct {
		cmd     string
		removed []string
		setuid  bool
	}{
		{"true", nil, false}, // the watch is used from the second command on
		{"echo '#!/bin/sh' > h && echo x > k && ln k lib/k2", nil, false},
		{"ln h repo/.git/h2 && chmod 4755 repo/.git/h2", nil, true},
		{"exec 3<lib/k2 && rm lib/k2 && chmod 2755 /proc/self/fd/3", nil, true},
		{"mkdir -p a/b/c/.git/hooks && echo x > a/b/c/.git/config", []string{"a/b/c/.git"}, false},
		{"mkdir -p ../outside-$$/x/.git && mv ../outside-$$/x lib/x && rmdir ../outside-$$", []string{"lib/x/.git"}, false},
		{"mv repo/.git repo/old && mkdir repo/.git", []string{"repo/.git"}, false},
		{"mkdir -p m/.GIT && mv m lib/m2", []string{"lib/m2/.GIT"}, false},
		{"mkdir -p deep && cd deep && mkdir -p 1/2/3/4/5/6/7/8 && echo 'gitdir: /x' > 1/2/3/4/5/6/7/8/.git", []string{"deep/1/2/3/4/5/6/7/8/.git"}, false},
		{"ln -s /etc lib/.git", []string{"lib/.git"}, false},
		{"echo '#!/bin/sh' > s && chmod 4755 s", nil, true},
		{"echo '#!/bin/sh' > t1 && chmod 2755 t1 && mv t1 lib/t", nil, true},
		{"true", nil, false},
	}
	setup := func(t *testing.T) (string, *Exec) {
		ws, err := paths.CanonicalWorkspace(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"lib", "repo/.git/hooks"} {
			os.MkdirAll(filepath.Join(ws, d), 0o755)
		}
		return ws, &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}, Protected: []string{".git/hooks", ".vak"}}
	}
	walkWS, walking := setup(t)
	watchWS, watching := setup(t)
	watching.Watch = fsguard.NewWatch(watchWS)
	defer watching.Watch.Close()
	for _, st := range steps {
		var got [2]*wire.BashResult
		for i, x := range []*Exec{walking, watching} {
			r, err := x.Bash(context.Background(), wire.BashArgs{Command: st.cmd}, nil)
			if err != nil || r.ExitCode != 0 {
				t.Fatalf("%q: %v %+v", st.cmd, err, r)
			}
			got[i] = r
			slices.Sort(r.ProtectedRemoved)
			slices.Sort(r.SetuidCleared)
			if !slices.Equal(r.ProtectedRemoved, st.removed) || (len(r.SetuidCleared) > 0) != st.setuid || len(r.TripwireWarnings) > 0 {
				t.Errorf("%q (watch %v): removed %q, setuid cleared %q, warnings %q; want removed %q, setuid %v", st.cmd, x.Watch != nil, r.ProtectedRemoved, r.SetuidCleared, r.TripwireWarnings, st.removed, st.setuid)
			}
		}
		if !slices.Equal(got[0].SetuidCleared, got[1].SetuidCleared) {
			t.Errorf("%q: setuid cleared by the walk %q, with the watch %q", st.cmd, got[0].SetuidCleared, got[1].SetuidCleared)
		}
		for _, rel := range st.removed {
			for _, ws := range []string{walkWS, watchWS} {
				if _, err := os.Lstat(filepath.Join(ws, rel)); err == nil {
					t.Errorf("%s survived in %s", rel, ws)
				}
			}
		}
	}
	if err := watching.Watch.Err(); err != nil {
		t.Fatalf("the watch gave up: %v", err)
	}
}
