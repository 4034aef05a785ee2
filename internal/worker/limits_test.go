package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/worker/wire"
)

// writeLineOf returns a write request line of exactly size bytes (without
// its newline) with id; idLast puts the id after the content.
func writeLineOf(t *testing.T, id string, size int, idLast bool) string {
	t.Helper()
	head, tail := `{"id":"`+id+`","op":"write","args":{"path":"f","content":"`, `"}}`
	if idLast {
		head, tail = `{"op":"write","args":{"path":"f","content":"`, `"},"id":"`+id+`"}`
	}
	n := size - len(head) - len(tail)
	if n < 0 {
		t.Fatalf("a line of %d bytes cannot hold a request", size)
	}
	return head + strings.Repeat("A", n) + tail
}

// TestRequestLimitBoundaries sends request lines one byte below, at and
// one byte above wire.MaxRequestBytes, and far above it, straight to the
// worker protocol's server. Every line is answered once, under its id:
// up to the limit by the tool (file_too_large: the content is over the
// write cap), above it with request_too_large naming the limit and what
// to do, also when the id comes after the content. The worker keeps
// serving, and nothing was written.
func TestRequestLimitBoundaries(t *testing.T) {
	c := newConn(t, nil)
	limit := wire.MaxRequestBytes
	for _, tc := range []struct {
		name   string
		line   string
		id     string
		code   string
		idLast bool
	}{
		{name: "limit-1", line: writeLineOf(t, "b1", limit-1, false), id: "b1", code: wire.CodeFileTooLarge},
		{name: "limit", line: writeLineOf(t, "b2", limit, false), id: "b2", code: wire.CodeFileTooLarge},
		{name: "limit+1", line: writeLineOf(t, "b3", limit+1, false), id: "b3", code: wire.CodeTooLarge},
		{name: "40 MiB", line: writeLineOf(t, "b4", 40<<20, false), id: "b4", code: wire.CodeTooLarge},
		{name: "limit+1, id last", line: writeLineOf(t, "b5", limit+1, true), id: "b5", code: wire.CodeTooLarge},
		{name: "not JSON", line: strings.Repeat("x", limit+1), id: "", code: wire.CodeTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.line) != limit-1 && len(tc.line) != limit && len(tc.line) <= limit {
				t.Fatalf("test bug: line of %d bytes", len(tc.line))
			}
			// The pipe is synchronous: write while reading. Answers come
			// in completion order: the ping's may come first.
			go io.WriteString(c.in, tc.line+"\n"+`{"id":"after-`+tc.name+`","op":"ping"}`+"\n")
			r, p := c.response(), c.response()
			if r.ID == "after-"+tc.name {
				r, p = p, r
			}
			if !p.OK || p.ID != "after-"+tc.name {
				t.Fatalf("the worker stopped serving: %+v", p)
			}
			if r.OK || r.Error == nil || r.Error.Code != tc.code || r.ID != tc.id {
				t.Fatalf("a line of %d bytes: %+v (error %+v), want id %q code %s", len(tc.line), r, r.Error, tc.id, tc.code)
			}
			if tc.code == wire.CodeTooLarge {
				msg := r.Error.Message
				if !strings.Contains(msg, fmt.Sprint(len(tc.line))) || !strings.Contains(msg, fmt.Sprint(limit)) || !strings.Contains(msg, "16 MiB") || !strings.Contains(msg, "smaller") {
					t.Errorf("the error does not say the size, the limit and what to do: %s", msg)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(c.ws, "f")); err == nil {
		t.Fatal("an oversized write was carried out")
	}
}

// TestClientRequestLimit drives the worker through wire.Client: a write
// whose request line is exactly the limit reaches the worker (and is
// refused there: over the write cap), one byte more and 17,000,000 bytes
// of content are refused by the client with request_too_large, the
// worker's code, and the connection goes on serving.
func TestClientRequestLimit(t *testing.T) {
	c := newConn(t, nil)
	cl := wire.NewClient(c.in, c.out)
	c.client = cl // newConn read the ready event
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The client numbers its requests from 1: the first is {"id":"1",...}.
	overhead := len(`{"id":"1","op":"write","args":{"path":"f","content":""}}`)
	for _, tc := range []struct {
		name    string
		content int
		code    string
	}{
		{"limit", wire.MaxRequestBytes - overhead, wire.CodeFileTooLarge},
		{"limit+1", wire.MaxRequestBytes - overhead + 1, wire.CodeTooLarge},
		{"17,000,000 bytes", 17_000_000, wire.CodeTooLarge},
		{"40 MiB", 40 << 20, wire.CodeTooLarge},
	} {
		err := cl.Call(ctx, wire.OpWrite, wire.WriteArgs{Path: "f", Content: strings.Repeat("A", tc.content)}, nil)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != tc.code {
			t.Fatalf("%s: %v, want code %s", tc.name, err, tc.code)
		}
		if tc.code == wire.CodeTooLarge && (!strings.Contains(we.Message, fmt.Sprint(wire.MaxRequestBytes)) || !strings.Contains(we.Message, "smaller")) {
			t.Errorf("%s: the error does not say the limit and what to do: %s", tc.name, we.Message)
		}
		if err := cl.Call(ctx, wire.OpPing, struct{}{}, nil); err != nil {
			t.Fatalf("%s: ping after it: %v", tc.name, err)
		}
	}
}
