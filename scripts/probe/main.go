// Command probe is a small static network prober baked into vak's test images
// (busybox's networking applets crash in name resolution when statically
// linked against glibc). Every subcommand prints one line and exits 0 on
// success, 1 on failure, 2 on usage errors, so tests can assert both.
//
//	probe connect HOST:PORT [TIMEOUT]   TCP connect
//	probe udp HOST:PORT [TIMEOUT]       send one datagram, wait for a reply
//	probe resolve NAME [SERVER:53]      DNS lookup (A/AAAA)
//	probe http URL [TIMEOUT]            GET, print status
//	probe sleep-tree N SECONDS          start N sleeping children (process-tree tests)
//	probe unix PATH                     connect to a UNIX socket
//	probe attempt NAME                  try a forbidden kernel operation (socket-inet,
//	                                    ptrace-parent, io_uring, unshare-user, mount, ...)
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	timeout := 3 * time.Second
	if len(os.Args) > 3 {
		if d, err := time.ParseDuration(os.Args[3]); err == nil {
			timeout = d
		}
	}
	var err error
	switch os.Args[1] {
	case "connect":
		err = connect(os.Args[2], timeout)
	case "udp":
		err = udp(os.Args[2], timeout)
	case "resolve":
		server := ""
		if len(os.Args) > 3 {
			server = os.Args[3]
		}
		err = resolve(os.Args[2], server)
	case "http":
		err = get(os.Args[2], timeout)
	case "sleep-tree":
		err = sleepTree(os.Args[2:])
	case "unix":
		err = unixConnect(os.Args[2])
	case "attempt":
		err = attempt(os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fmt.Println("FAIL", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: probe connect|udp|resolve|http|sleep-tree|unix|attempt ARG [ARG]")
	os.Exit(2)
}

func connect(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println("OK connected", c.RemoteAddr())
	return nil
}

func udp(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("probe")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Printf("OK reply %q\n", buf[:n])
	return nil
}

func resolve(name, server string) error {
	r := net.DefaultResolver
	if server != "" {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, name)
	if err != nil {
		return err
	}
	fmt.Println("OK", addrs)
	return nil
}

func get(url string, timeout time.Duration) error {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		TLSClientConfig:   &tls.Config{},
		ForceAttemptHTTP2: true,
	}}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Printf("OK %d %s\n", resp.StatusCode, body)
	return nil
}

func sleepTree(args []string) error {
	if len(args) < 2 {
		usage()
	}
	n, _ := strconv.Atoi(args[0])
	for i := 0; i < n; i++ {
		cmd := exec.Command("sleep", args[1])
		if err := cmd.Start(); err != nil {
			return err
		}
		fmt.Println("child", cmd.Process.Pid)
	}
	time.Sleep(time.Hour)
	return nil
}
