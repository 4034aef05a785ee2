// Package entry is what the lean stage program runs (see package
// leanstage): the worker entry points a re-executed worker needs, and the
// worker command's argument handling. The vak binary registers the same
// entry points (launch.RegisterWorkers), so a worker behaves alike
// whichever of the two programs runs it.
package entry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"

	"vak/internal/netfence"
	"vak/internal/sandbox"
	"vak/internal/sandbox/landlock"
	"vak/internal/worker"
)

// Exit statuses of Main besides the worker's own: the vak command line's
// (cli.ExitUsage and cli.ExitInternal; a test there keeps them equal).
const (
	ExitUsage    = 2
	ExitInternal = 70
)

var registerWorkers sync.Once

// RegisterWorkers registers the worker entry points (sandbox.RegisterWorker)
// of a re-executed worker: landlock's stages, whose stage 1 serves a
// proxied network with netfence's native fence. Calling it again does
// nothing.
func RegisterWorkers() {
	registerWorkers.Do(func() {
		sandbox.RegisterWorker(string(sandbox.Landlock), landlock.WorkerEntry(fenceServer))
	})
}

// fenceServer is landlock's FenceServer: netfence's native fence.
func fenceServer(dialData, dialDNS func(context.Context) (net.Conn, error), errLog *log.Logger) (func(), error) {
	l, err := netfence.ServeLocal(netfence.LocalConfig{}, dialData, dialDNS, errLog)
	if err != nil {
		return nil, err
	}
	return l.Close, nil
}

// Main runs the worker command, args being what follows the program name:
// sandbox.WorkerCommand, then optionally --stage N (default 1), as the vak
// binary's hidden command takes them. It returns the exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	stage, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "vak: %v\n", err)
		return ExitUsage
	}
	RegisterWorkers()
	code, err := worker.Main(ctx, stage, stdin, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "vak: worker: %v\n", err)
		return ExitInternal
	}
	return code
}

// errUsage is what the lean program says of any other command line: it is
// started by vak only.
var errUsage = errors.New("this is vak's lean stage program, started by vak itself; usage: " + sandbox.WorkerCommand + " [--stage N]")

// parseArgs returns the stage of a worker command line.
func parseArgs(args []string) (int, error) {
	if len(args) == 0 || args[0] != sandbox.WorkerCommand {
		return 0, errUsage
	}
	var v string
	switch rest := args[1:]; {
	case len(rest) == 0:
		return 1, nil
	case len(rest) == 2 && rest[0] == "--stage":
		v = rest[1]
	case len(rest) == 1 && strings.HasPrefix(rest[0], "--stage="):
		v = strings.TrimPrefix(rest[0], "--stage=")
	default:
		return 0, errUsage
	}
	stage, err := strconv.Atoi(v)
	if err != nil || stage < 1 {
		return 0, fmt.Errorf("--stage %q: want a stage number; %w", v, errUsage)
	}
	return stage, nil
}
