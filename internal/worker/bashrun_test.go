package worker

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/worker/wire"
)

// TestBashRun: a command a backend runs itself gets what BashArgv gives a
// wrapper's process: its status and output (capped, or streamed), the
// lifeline, a timeout and a cancel that end it and say so, and the
// tripwire after it.
func TestBashRun(t *testing.T) {
	x := argvExec(t)
	lr, lw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Close()
	defer lw.Close()
	x.Lifeline = lr
	// blocks until its context ends, then returns what a killed
	// container's wrapper would.
	blocks := func(ctx context.Context, _ *os.File, _, _ io.Writer) (int, error) {
		<-ctx.Done()
		return 125, nil
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		args wire.BashArgs
		run  func(ctx context.Context, life *os.File, stdout, stderr io.Writer) (int, error)
		emit bool
		want func(*wire.BashResult) bool
		err  string
	}{
		{name: "status and output", ctx: context.Background(), run: func(_ context.Context, life *os.File, o, e io.Writer) (int, error) {
			if life != lr {
				return 0, errors.New("not the lifeline")
			}
			io.WriteString(o, "out")
			io.WriteString(e, "err")
			return 3, nil
		}, want: func(r *wire.BashResult) bool {
			return r.ExitCode == 3 && r.Stdout == "out" && r.Stderr == "err" && !r.TimedOut && r.Signal == ""
		}},
		{name: "output capped", ctx: context.Background(), args: wire.BashArgs{MaxOutputBytes: 4}, run: func(_ context.Context, _ *os.File, o, _ io.Writer) (int, error) {
			io.WriteString(o, "0123456789")
			return 0, nil
		}, want: func(r *wire.BashResult) bool { return r.Stdout == "0123" && r.StdoutTruncated }},
		{name: "timeout", ctx: context.Background(), args: wire.BashArgs{TimeoutMS: 50}, run: blocks, want: func(r *wire.BashResult) bool {
			return r.TimedOut && !r.Canceled && r.Signal == "killed" && r.ExitCode == 137
		}},
		{name: "cancel", ctx: cancelled, run: blocks, want: func(r *wire.BashResult) bool {
			return r.Canceled && !r.TimedOut && r.ExitCode == 137
		}},
		{name: "tripwire", ctx: context.Background(), run: func(context.Context, *os.File, io.Writer, io.Writer) (int, error) {
			return 0, os.MkdirAll(filepath.Join(x.Workspace, ".git", "hooks"), 0o755)
		}, want: func(r *wire.BashResult) bool {
			_, err := os.Stat(filepath.Join(x.Workspace, ".git", "hooks"))
			return errors.Is(err, os.ErrNotExist) && strings.Contains(strings.Join(r.ProtectedRemoved, " "), ".git")
		}},
		{name: "a fault of the caller", ctx: context.Background(), run: func(context.Context, *os.File, io.Writer, io.Writer) (int, error) {
			return 0, errors.New("bad spec")
		}, err: "bad spec"},
		{name: "fields that are run's", ctx: context.Background(), args: wire.BashArgs{Command: "true"}, run: blocks, err: "takes no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := x.BashRun(tc.ctx, tc.args, tc.run, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !tc.want(res) {
				t.Fatalf("BashRun: %+v, %v", res, err)
			}
		})
	}
	t.Run("streamed", func(t *testing.T) {
		var got []string
		res, err := x.BashRun(context.Background(), wire.BashArgs{}, func(_ context.Context, _ *os.File, o, e io.Writer) (int, error) {
			io.WriteString(o, "a")
			io.WriteString(e, "b")
			return 0, nil
		}, func(stream string, p []byte) { got = append(got, stream+":"+string(p)) })
		if err != nil || res.Stdout != "" || strings.Join(got, ",") != "stdout:a,stderr:b" {
			t.Fatalf("streamed: %+v %v %q", res, err, got)
		}
	})
}
