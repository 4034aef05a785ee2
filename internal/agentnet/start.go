package agentnet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DefaultStartTimeout bounds how long Ensure waits for a broker it started
// to answer.
const DefaultStartTimeout = 15 * time.Second

// maxLogBytes: a broker log larger than this is truncated when a new
// broker starts.
const maxLogBytes = 1 << 20

// Ensure makes sure a broker answers on dir's socket, starting one with
// command when none does: the first client that needs the broker starts
// it. The broker runs detached (its own session and process group, working
// directory dir, stdin /dev/null, output appended to LogFile(dir); it
// holds none of the client's descriptors, so an MCP client's pipes close
// when the client's server exits) and outlives the client.
// Starters serialize on StartLockName, and a starter that gets the lock
// checks the socket again, so concurrent starters (processes or
// goroutines) start one broker; a socket file no one listens on is stale
// and the new broker replaces it (Listen). Ensure reports whether it
// started the broker. It fails, naming the log, when the broker exits or
// does not answer before ctx ends or DefaultStartTimeout passes.
func Ensure(ctx context.Context, dir string, command func() (*exec.Cmd, error)) (started bool, err error) {
	c := NewClient(dir)
	defer c.Close()
	if c.Ping(ctx) == nil {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("agentnet: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	lockPath := filepath.Join(dir, StartLockName)
	var unlock func()
	for {
		var ok bool
		if unlock, ok, err = tryLock(lockPath); err != nil {
			return false, err
		}
		if ok {
			break
		}
		// Another client is starting the broker: wait for it.
		if c.Ping(ctx) == nil {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("agentnet: waiting for another client to start the broker (%s): %w", lockPath, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer unlock()
	if c.Ping(ctx) == nil {
		return false, nil // it started while this one waited for the lock
	}
	cmd, err := command()
	if err != nil {
		return false, err
	}
	logPath := LogFile(dir)
	if st, err := os.Stat(logPath); err == nil && st.Size() > maxLogBytes {
		_ = os.Truncate(logPath, 0)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return false, fmt.Errorf("agentnet: broker log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- %s: started on demand by pid %d: %s\n", time.Now().UTC().Format(time.RFC3339), os.Getpid(), cmd.Args)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, logf, logf
	if cmd.Dir == "" {
		// Not the starter's directory (often a workspace): the broker
		// outlives it. A relative program path would now resolve
		// against dir: make it absolute first.
		if !filepath.IsAbs(cmd.Path) && strings.ContainsRune(cmd.Path, filepath.Separator) {
			p, err := filepath.Abs(cmd.Path)
			if err != nil {
				return false, fmt.Errorf("agentnet: start the broker: %w", err)
			}
			cmd.Path = p
		}
		cmd.Dir = dir
	}
	if err := detach(cmd); err != nil {
		return false, err
	}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("agentnet: start the broker (%s): %w", cmd.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reap it if it exits while this process lives
	for {
		if c.Ping(ctx) == nil {
			return true, nil
		}
		select {
		case err := <-exited:
			return false, fmt.Errorf("agentnet: the broker started on demand exited (%v): %s (log: %s)", err, logTail(logPath), logPath)
		case <-ctx.Done():
			return false, fmt.Errorf("agentnet: the broker started on demand (pid %d) does not answer on %s: %w (log: %s)", cmd.Process.Pid, c.Socket, ctx.Err(), logPath)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// logTail is the last line of the broker log (the error it exited with).
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 4096 {
		f.Seek(st.Size()-4096, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	return string(lines[len(lines)-1])
}
