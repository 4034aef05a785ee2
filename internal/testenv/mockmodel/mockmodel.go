// Package mockmodel is a local stand-in for a model provider's Responses
// API (POST /v1/responses, streamed as server-sent events), so that real,
// unmodified agent CLIs (the Codex CLI) can be driven by a test script:
// each request the agent sends is recorded, and the script decides the
// reply (a function call to one of the tools the agent offered, or a final
// message). It is test support only.
package mockmodel

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Request is one model request as the agent sent it.
type Request struct {
	// Tools are the function tools offered, namespaced ones (type
	// "namespace", e.g. Codex's mcp__SERVER) with their namespace.
	Tools []Tool
	// Outputs are the function_call_output items of the input, in order
	// (what earlier tool calls returned).
	Outputs []string
	// Raw is the request body.
	Raw json.RawMessage
	// Authorization is the request's Authorization header (the API key
	// the agent sent, as the model provider would receive it).
	Authorization string
}

// Tool is one function tool of a request.
type Tool struct {
	Namespace string // empty for a top-level function
	Name      string
}

// Item is one output item of a reply: a function call (Name and Arguments
// set, Namespace for a namespaced tool) or an assistant message (Text).
type Item struct {
	Namespace string
	Name      string
	Arguments string
	Text      string
}

// Script returns the reply to the n-th request (0-based).
type Script func(n int, r Request) []Item

// Server is a running mock.
type Server struct {
	URL string // base URL ending in /v1

	mu   sync.Mutex
	reqs []Request
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Start serves script on a loopback port until the test ends.
func Start(t testing.TB, script Script) *Server { return StartOn(t, nil, nil, script) }

// StartOn is Start on the listener l (nil: a loopback port), e.g. an
// address that a proxied sandbox reaches only through vak's gateway, over
// TLS with tlsConfig when it is not nil.
func StartOn(t testing.TB, l net.Listener, tlsConfig *tls.Config, script Script) *Server {
	return StartOnWith(t, l, tlsConfig, script, nil)
}

// StartOnWith is StartOn with other serving every request that is not a
// POST to .../responses (nil: 404), e.g. the other endpoints of a backend
// an agent calls besides the model.
func StartOnWith(t testing.TB, l net.Listener, tlsConfig *tls.Config, script Script, other http.Handler) *Server {
	s := &Server{}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
			if other != nil {
				other.ServeHTTP(w, r)
				return
			}
			http.Error(w, "mockmodel: only POST /v1/responses", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := parse(body)
		if err != nil {
			http.Error(w, "mockmodel: "+err.Error(), http.StatusBadRequest)
			return
		}
		req.Authorization = r.Header.Get("Authorization")
		s.mu.Lock()
		n := len(s.reqs)
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		writeSSE(w, n, script(n, req))
	}))
	if l != nil {
		hs.Listener.Close()
		hs.Listener = l
	}
	if tlsConfig != nil {
		hs.TLS = tlsConfig
		hs.StartTLS()
	} else {
		hs.Start()
	}
	t.Cleanup(hs.Close)
	s.URL = hs.URL + "/v1"
	return s
}

func parse(body []byte) (Request, error) {
	var in struct {
		Tools []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"tools"`
		Input []struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return Request{}, fmt.Errorf("request body: %w", err)
	}
	r := Request{Raw: body}
	for _, t := range in.Tools {
		switch t.Type {
		case "function":
			r.Tools = append(r.Tools, Tool{Name: t.Name})
		case "namespace":
			for _, sub := range t.Tools {
				r.Tools = append(r.Tools, Tool{Namespace: t.Name, Name: sub.Name})
			}
		}
	}
	for _, it := range in.Input {
		if it.Type == "function_call_output" {
			var s string
			if json.Unmarshal(it.Output, &s) != nil {
				s = string(it.Output)
			}
			r.Outputs = append(r.Outputs, s)
		}
	}
	return r, nil
}

func writeSSE(w http.ResponseWriter, n int, items []Item) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	id := fmt.Sprintf("resp_%d", n)
	event := func(v map[string]any) {
		data, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], data)
	}
	event(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	for i, it := range items {
		var item map[string]any
		if it.Name != "" {
			item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d_%d", n, i), "call_id": fmt.Sprintf("call_%d_%d", n, i), "name": it.Name, "arguments": it.Arguments, "status": "completed"}
			if it.Namespace != "" {
				item["namespace"] = it.Namespace
			}
		} else {
			item = map[string]any{"type": "message", "role": "assistant", "id": fmt.Sprintf("msg_%d_%d", n, i), "status": "completed",
				"content": []map[string]any{{"type": "output_text", "text": it.Text, "annotations": []any{}}}}
		}
		event(map[string]any{"type": "response.output_item.done", "output_index": i, "item": item})
	}
	event(map[string]any{"type": "response.completed", "response": map[string]any{"id": id, "output": []any{},
		"usage": map[string]any{"input_tokens": 1, "input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens": 1, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 2}}})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
