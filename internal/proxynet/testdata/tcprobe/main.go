// Command tcprobe is a Testcontainers-go client for the nested Docker tests
// (issue 14; docs/nested-docker.md). It is a module of its own so that vak's
// module does not depend on testcontainers-go; the tests build it static
// (CGO_ENABLED=0) on the host and run it inside a `--docker` session.
//
//	tcprobe run IMAGE     Testcontainers starts IMAGE (busybox httpd on
//	                      8080), waits for the port, GETs it, terminates it
//	tcprobe reaper NAME [SOCKET]
//	                      what a reaper (Ryuk) does with the socket bound at
//	                      /var/run/docker.sock (or SOCKET): ping, list, try
//	                      to create a container and an exec, remove NAME
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

func main() {
	if len(os.Args) < 3 || len(os.Args) > 4 || (os.Args[1] == "run" && len(os.Args) != 3) {
		fmt.Fprintln(os.Stderr, "usage: tcprobe run IMAGE | tcprobe reaper CONTAINER [SOCKET]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2])
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

func run(image string) error {
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
	if err := testcontainers.TerminateContainer(c); err != nil {
		return fmt.Errorf("terminate: %w", err)
	}
	fmt.Println("terminated", id)
	return nil
}

// reaper talks plain HTTP to the socket a reaper gets and prints one line
// per request: "NAME STATUS MESSAGE".
func reaper(victim, sock string) error {
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}, Timeout: 30 * time.Second}
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
