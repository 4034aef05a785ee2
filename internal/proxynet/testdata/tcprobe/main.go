// Command tcprobe is a Testcontainers-go client for the nested Docker tests
// (issue 14; docs/nested-docker.md). It is a module of its own so that vak's
// module does not depend on testcontainers-go; the tests build it static
// (CGO_ENABLED=0) on the host and run it inside a `--docker` session.
//
//	tcprobe run IMAGE     Testcontainers starts IMAGE (busybox httpd on
//	                      8080), waits for the port, GETs it, terminates it
//	tcprobe leave IMAGE   the same with Ryuk on, but exits without
//	                      terminating: the reaper is to remove it
//	tcprobe ryuk          a stand-in for Ryuk's image (not buildable here):
//	                      Ryuk's protocol on :8080 (label filters, ACK), and
//	                      when no client has been connected for
//	                      RYUK_RECONNECTION_TIMEOUT, removes what matches
//	                      through /var/run/docker.sock
//	tcprobe reaper NAME [SOCKET]
//	                      what a reaper (Ryuk) does with the socket bound at
//	                      /var/run/docker.sock (or SOCKET): ping, list, try
//	                      to create a container and an exec, remove NAME
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "ryuk" {
		if err := ryuk(); err != nil {
			fmt.Println("FAIL", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 3 || len(os.Args) > 4 || (os.Args[1] != "reaper" && len(os.Args) != 3) {
		fmt.Fprintln(os.Stderr, "usage: tcprobe run IMAGE | tcprobe leave IMAGE | tcprobe ryuk | tcprobe reaper CONTAINER [SOCKET]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2], true)
	case "leave":
		err = run(os.Args[2], false)
	case "reaper":
		sock := "/var/run/docker.sock"
		if len(os.Args) == 4 {
			sock = os.Args[3]
		}
		err = reaper(os.Args[2], sock)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Println("FAIL", err)
		os.Exit(1)
	}
}

func run(image string, terminate bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := testcontainers.Run(ctx, image,
		testcontainers.WithCmd("sh", "-c", "mkdir -p /w && echo hello-testcontainers > /w/index.html && exec httpd -f -p 8080 -h /w"),
		testcontainers.WithExposedPorts("8080/tcp"),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/").WithPort("8080/tcp").WithStartupTimeout(time.Minute)),
	)
	if err != nil {
		return fmt.Errorf("testcontainers.Run: %w", err)
	}
	id := c.GetContainerID()
	endpoint, err := c.PortEndpoint(ctx, "8080/tcp", "http")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return fmt.Errorf("port endpoint: %w", err)
	}
	res, err := http.Get(endpoint + "/")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return fmt.Errorf("GET %s: %w", endpoint, err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Printf("container %s endpoint %s status %d body %s\n", id, endpoint, res.StatusCode, strings.TrimSpace(string(body)))
	if !terminate {
		return nil
	}
	if err := testcontainers.TerminateContainer(c); err != nil {
		return fmt.Errorf("terminate: %w", err)
	}
	fmt.Println("terminated", id)
	return nil
}

// unixClient talks HTTP to the Engine API on socket sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}, Timeout: 30 * time.Second}
}

// ryuk speaks Ryuk's protocol: a client sends one line of label filters
// ("label=k=v&label=k2=v2") and gets "ACK"; once no client has been
// connected for the reconnection timeout, every container, network and
// volume matching a filter set is removed, and ryuk exits.
func ryuk() error {
	timeout := 10 * time.Second
	if v := os.Getenv("RYUK_RECONNECTION_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		timeout = d
	}
	ln, err := net.Listen("tcp", ":8080")
	if err != nil {
		return err
	}
	fmt.Println("Started")
	var mu sync.Mutex
	var filters [][]string
	conns, seen := 0, false
	idle := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns++
			seen = true
			mu.Unlock()
			go func() {
				defer func() {
					c.Close()
					mu.Lock()
					conns--
					if conns == 0 {
						select {
						case idle <- struct{}{}:
						default:
						}
					}
					mu.Unlock()
				}()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					var f []string
					for _, part := range strings.Split(sc.Text(), "&") {
						if l, ok := strings.CutPrefix(part, "label="); ok {
							f = append(f, l)
						}
					}
					mu.Lock()
					filters = append(filters, f)
					mu.Unlock()
					fmt.Println("filter", strings.Join(f, ","))
					c.Write([]byte("ACK\n"))
				}
			}()
		}
	}()
	for {
		<-idle
		time.Sleep(timeout)
		mu.Lock()
		done := conns == 0 && seen
		fs := filters
		mu.Unlock()
		if done {
			ln.Close()
			return reap(fs)
		}
	}
}

// reap removes the containers, networks and volumes matching each filter
// set through the socket Ryuk gets.
func reap(sets [][]string) error {
	cl := unixClient("/var/run/docker.sock")
	for _, f := range sets {
		q, _ := json.Marshal(map[string][]string{"label": f})
		for _, kind := range []struct{ list, del, key string }{
			{"/containers/json?all=1&filters=", "/containers/%s?force=1&v=1", "Id"},
			{"/networks?filters=", "/networks/%s", "Id"},
			{"/volumes?filters=", "/volumes/%s?force=1", "Name"},
		} {
			res, err := cl.Get("http://docker/v1.41" + kind.list + url.QueryEscape(string(q)))
			if err != nil {
				return err
			}
			var items []map[string]any
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if kind.key == "Name" {
				var v struct{ Volumes []map[string]any }
				json.Unmarshal(body, &v)
				items = v.Volumes
			} else {
				json.Unmarshal(body, &items)
			}
			for _, it := range items {
				id, _ := it[kind.key].(string)
				req, _ := http.NewRequest("DELETE", "http://docker/v1.41"+fmt.Sprintf(kind.del, id), nil)
				res, err := cl.Do(req)
				if err != nil {
					return err
				}
				res.Body.Close()
				fmt.Println("removed", id, res.StatusCode)
			}
		}
	}
	return nil
}

// reaper talks plain HTTP to the socket a reaper gets and prints one line
// per request: "NAME STATUS MESSAGE".
func reaper(victim, sock string) error {
	cl := unixClient(sock)
	do := func(name, method, path, body string) error {
		req, err := http.NewRequest(method, "http://docker/v1.41"+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := cl.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 400))
		res.Body.Close()
		msg := strings.Join(strings.Fields(string(b)), " ")
		if res.StatusCode/100 == 2 && method == "GET" {
			msg = fmt.Sprintf("(%d bytes)", len(b))
		}
		fmt.Printf("%s %d %s\n", name, res.StatusCode, msg)
		return nil
	}
	for _, r := range []struct{ name, method, path, body string }{
		{"ping", "GET", "/_ping", ""},
		{"list", "GET", "/containers/json?all=1", ""},
		{"create", "POST", "/containers/create", `{"Image":"busybox","HostConfig":{"Privileged":true}}`},
		{"create-plain", "POST", "/containers/create", `{"Image":"busybox"}`},
		{"exec", "POST", "/containers/" + victim + "/exec", `{"Cmd":["true"]}`},
		{"remove", "DELETE", "/containers/" + victim + "?force=1", ""},
	} {
		if err := do(r.name, r.method, r.path, r.body); err != nil {
			return err
		}
	}
	return nil
}
