// Command probe is a small static network prober baked into vak's test images
// (busybox's networking applets crash in name resolution when statically
// linked against glibc). Every subcommand prints one result line starting
// OK or FAIL and exits 0 on success, 1 on failure, 2 on usage errors, so
// tests can assert both.
//
//	probe connect HOST:PORT [TIMEOUT]   TCP connect
//	probe udp HOST:PORT [TIMEOUT]       send one datagram, wait for a reply
//	probe resolve NAME [SERVER:53]      DNS lookup (A/AAAA) with the Go resolver
//	probe http [-H 'Name: value']... [--host HOST] [--sni NAME] [-X METHOD] [-d BODY] URL [TIMEOUT]
//	                                    request (GET; POST with -d), print status and body.
//	                                    Honours HTTPS_PROXY/HTTP_PROXY/NO_PROXY. --host
//	                                    sends another Host header than the URL's; --sni
//	                                    sends another TLS server name and turns
//	                                    certificate verification OFF (printed as verify=off)
//	probe tls URL [TIMEOUT]             HTTPS GET with verification on (roots from
//	                                    SSL_CERT_FILE): OK STATUS issuer="CN of the chain's
//	                                    last cert" subject="leaf CN" proto=P body=FIRST-LINE
//	probe dns [--tcp] [--type A|AAAA] NAME SERVER[:53] [TIMEOUT]
//	                                    raw DNS query to SERVER: OK NOERROR A ADDR,... or
//	                                    FAIL rcode=NXDOMAIN answers=0 (or a timeout)
//	probe quic HOST:PORT [TIMEOUT]      send a QUIC-v1-Initial-shaped datagram, wait for
//	                                    any reply (a proxied sandbox must time out)
//	probe ping HOST [TIMEOUT]           ICMP echo (unprivileged ICMP socket, else raw)
//	probe bench [--http1] [--timeout D] URL N CONCURRENCY
//	                                    N keep-alive GETs (verification on) at CONCURRENCY
//	                                    after an unmeasured warm-up round; prints
//	                                    OK|FAIL {"n":..,"errors":..,"median_ms":..,...}
//	                                    (vak/internal/testenv/testnet.Bench); FAIL if any
//	                                    request failed or answered >= 400
//	probe sleep-tree N SECONDS          start N sleeping children (process-tree tests)
//	probe setsid-beat FILE              leave the session from a thread that is not
//	                                    the first, then write the time into FILE
//	                                    every 50 ms for ever (process-tree tests)
//	probe unix PATH [FILE]              connect to a UNIX socket; with FILE, send its bytes
//	                                    (a raw HTTP request, say) and print OK and, quoted,
//	                                    what comes back until the peer closes (60s at most)
//	probe attempt NAME                  try a forbidden kernel operation (socket-inet,
//	                                    ptrace-parent, io_uring, unshare-user, mount, ...)
//	probe chmod VIA MODE FILE           set FILE's mode (octal) through one syscall VIA:
//	                                    chmod, fchmod, fchmodat, fchmodat2; prints OK
//	                                    and the mode the file has afterwards
//
// TIMEOUT is a Go duration (default 3s).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// defaultTimeout applies when a subcommand's TIMEOUT is omitted.
const defaultTimeout = 3 * time.Second

// errPrinted means the subcommand already printed its FAIL line.
var errPrinted = errors.New("failure already reported")

// errUsage marks command-line errors (exit status 2).
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	args := os.Args[2:]
	var err error
	switch os.Args[1] {
	case "connect":
		err = withTimeout(args, 1, func(pos []string, timeout time.Duration) error { return connect(pos[0], timeout) })
	case "udp":
		err = withTimeout(args, 1, func(pos []string, timeout time.Duration) error { return udp(pos[0], timeout) })
	case "resolve":
		server := ""
		if len(args) > 1 {
			server = args[1]
		}
		err = resolve(args[0], server)
	case "http":
		err = httpCmd(args)
	case "tls":
		err = withTimeout(args, 1, func(pos []string, timeout time.Duration) error { return tlsCmd(pos[0], timeout) })
	case "dns":
		err = dnsCmd(args)
	case "quic":
		err = withTimeout(args, 1, func(pos []string, timeout time.Duration) error { return quic(pos[0], timeout) })
	case "ping":
		err = withTimeout(args, 1, func(pos []string, timeout time.Duration) error { return ping(pos[0], timeout) })
	case "bench":
		err = benchCmd(args)
	case "sleep-tree":
		err = sleepTree(args)
	case "setsid-beat":
		err = setsidBeat(args[0])
	case "unix":
		if len(args) == 2 {
			err = unixSend(args[0], args[1])
			break
		}
		err = unixConnect(args[0])
	case "attempt":
		err = attempt(args[0])
	case "chmod":
		if len(args) != 3 {
			err = fmt.Errorf("%w: chmod VIA MODE FILE", errUsage)
			break
		}
		err = chmodVia(args[0], args[1], args[2])
	default:
		usage()
	}
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "probe:", err)
		usage()
	case errors.Is(err, errPrinted):
		os.Exit(1)
	case err != nil:
		fmt.Println("FAIL", oneLine(err.Error()))
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: probe SUBCOMMAND ARG...
  connect HOST:PORT [TIMEOUT] | udp HOST:PORT [TIMEOUT] | resolve NAME [SERVER:53]
  http [-H 'Name: value']... [--host HOST] [--sni NAME] [-X METHOD] [-d BODY] URL [TIMEOUT]
  tls URL [TIMEOUT] | dns [--tcp] [--type A|AAAA] NAME SERVER[:53] [TIMEOUT]
  quic HOST:PORT [TIMEOUT] | ping HOST [TIMEOUT]
  bench [--http1] [--timeout D] URL N CONCURRENCY
  sleep-tree N SECONDS | unix PATH [FILE] | attempt NAME`)
	os.Exit(2)
}

// withTimeout checks that args are n positionals plus an optional TIMEOUT
// and calls fn.
func withTimeout(args []string, n int, fn func(pos []string, timeout time.Duration) error) error {
	if len(args) < n || len(args) > n+1 {
		return fmt.Errorf("%w: want %d argument(s) and an optional TIMEOUT, got %q", errUsage, n, args)
	}
	timeout, err := parseTimeout(args[n:])
	if err != nil {
		return err
	}
	return fn(args[:n], timeout)
}

// parseTimeout parses an optional TIMEOUT argument.
func parseTimeout(rest []string) (time.Duration, error) {
	if len(rest) == 0 {
		return defaultTimeout, nil
	}
	d, err := time.ParseDuration(rest[0])
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: bad TIMEOUT %q", errUsage, rest[0])
	}
	return d, nil
}

// cmdArgs are a subcommand's parsed arguments.
type cmdArgs struct {
	pos     []string
	values  map[string][]string // flag name (without dashes) -> values, in order
	present map[string]bool
}

func (a cmdArgs) value(name string) string {
	v := a.values[name]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseArgs splits args into positionals and flags, anywhere on the line.
// Flags take one or two dashes; valueFlags take a value (next argument or
// after '='), boolFlags none.
func parseArgs(args []string, valueFlags, boolFlags []string) (cmdArgs, error) {
	a := cmdArgs{values: map[string][]string{}, present: map[string]bool{}}
	isIn := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if len(arg) < 2 || arg[0] != '-' {
			a.pos = append(a.pos, arg)
			continue
		}
		if arg == "--" {
			a.pos = append(a.pos, args[i+1:]...)
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		switch {
		case isIn(boolFlags, name):
			if hasVal {
				return a, fmt.Errorf("%w: flag %s takes no value", errUsage, arg)
			}
			a.present[name] = true
		case isIn(valueFlags, name):
			if !hasVal {
				if i+1 >= len(args) {
					return a, fmt.Errorf("%w: flag %s needs a value", errUsage, arg)
				}
				i++
				val = args[i]
			}
			a.present[name] = true
			a.values[name] = append(a.values[name], val)
		default:
			return a, fmt.Errorf("%w: unknown flag %s", errUsage, arg)
		}
	}
	return a, nil
}

// oneLine keeps a result on one line.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", " ")
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

func sleepTree(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("%w: sleep-tree N SECONDS", errUsage)
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
