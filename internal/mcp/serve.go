package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"vak/internal/worker/wire"
)

// Serve serves s on stdio (in, out) until ctx ends or, with listen set, on
// streamable HTTP at listen (see Listen): then the endpoint and its bearer
// token (or socket) are printed to out, once, and never logged. What is
// logged at start gets attrs. Errors about listen wrap ErrListen.
func (s *Server) Serve(ctx context.Context, listen string, in io.Reader, out io.Writer, attrs ...any) error {
	log := s.opts.Log
	if listen == "" {
		log.Info("serving MCP on stdio", attrs...)
		return s.ServeStdio(ctx, in, out)
	}
	l, err := Listen(listen)
	if err != nil {
		if !errors.Is(err, ErrListen) {
			err = fmt.Errorf("%w: %w", ErrListen, err)
		}
		return err
	}
	log.Info("serving MCP over streamable HTTP", append([]any{"url", l.URL, "socket", l.Socket}, attrs...)...)
	fmt.Fprintf(out, "url: %s\n", l.URL)
	if l.Socket != "" {
		fmt.Fprintf(out, "socket: %s\n", l.Socket)
	} else {
		fmt.Fprintf(out, "authorization: Bearer %s\n", l.Token)
	}
	return ServeHTTP(ctx, l, s.HTTPHandler(l))
}

// LogPlanted logs what a session's workspace watcher removed or cleared
// while the session ran (broker.Options.Planted), one warning per entry.
func LogPlanted(log *slog.Logger, res *wire.BashResult) {
	for _, p := range res.ProtectedRemoved {
		log.Warn("removed a protected path planted in the workspace while the session ran (it would run outside the sandbox)", "path", p)
	}
	for _, p := range res.SetuidCleared {
		log.Warn("cleared the setuid or setgid bits of a file in the workspace", "file", p)
	}
	for _, w := range res.TripwireWarnings {
		log.Warn("workspace watcher", "warning", w)
	}
}
