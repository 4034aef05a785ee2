// Command testnet is vak's hermetic test "internet": one static program,
// baked into the test image as /bin/testnet, with three roles.
//
//	testnet upstream --cert FILE --key FILE [--listen :443] [--http :80] [--control :9999]
//	    HTTPS (TLS 1.2/1.3, ALPN h2 and http/1.1) and plain HTTP server that
//	    echoes each request as JSON; GET /status/N answers status N,
//	    GET /bytes/N sends N bytes, /sink records without echoing. The
//	    control port lists the requests served (GET /requests, POST /reset).
//	testnet canary [--control :9999] [--tcp LIST] [--udp LIST] [--no-default-ports]
//	               [--dns LIST] [--bind IP] [--answer IP] [--answer6 IP] [--icmp=false]
//	    Counts every TCP connection (22, 53, 80, 443, 8080), UDP datagram
//	    (9, 53, 443), DNS query (--dns ports, default 53) and ICMP echo
//	    request that reaches it; answers DNS with an A record, other UDP with
//	    a reply and HTTP with a 200, so a leak "works" for the client too.
//	    GET /counts and POST /reset on the control port.
//	testnet gencert --ca-out DIR --names a.test,b.test [--days N]
//	    Writes a test CA (ca.pem) and a leaf for the names (cert.pem, key.pem).
//	testnet version
//	    Prints the wire API version (vak/internal/testenv/testnet.APIVersion).
//
// The JSON types live in vak/internal/testenv/testnet. The serving roles
// print one line starting "testnet ROLE: ready" once every listener is
// bound; they run until SIGINT or SIGTERM. Exit status: 0 success, 1
// failure, 2 usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"vak/internal/testenv/testnet"
)

// errUsage marks command-line errors (exit status 2).
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "upstream":
		err = runUpstream(ctx, args)
	case "canary":
		err = runCanary(ctx, args)
	case "gencert":
		err = runGencert(args)
	case "version":
		fmt.Println(testnet.APIVersion)
	case "help", "-h", "--help":
		fmt.Print(usageText)
		return
	default:
		usage()
	}
	if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "testnet:", err)
		fmt.Fprint(os.Stderr, usageText)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testnet:", err)
		os.Exit(1)
	}
}

const usageText = `usage:
  testnet upstream --cert FILE --key FILE [--listen :443] [--http :80] [--control :9999]
  testnet canary [--control :9999] [--tcp LIST] [--udp LIST] [--no-default-ports]
                 [--dns LIST] [--bind IP] [--answer IP] [--answer6 IP] [--icmp=false]
  testnet gencert --ca-out DIR --names a.test,b.test [--days N]
  testnet version
`

func usage() {
	fmt.Fprint(os.Stderr, usageText)
	os.Exit(2)
}

// newFlags returns a flag set whose errors are returned, not printed.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("testnet "+name, flag.ContinueOnError)
	fs.SetOutput(discard{})
	return fs
}

// parse parses args into fs and rejects positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q", errUsage, fs.Name(), fs.Arg(0))
	}
	return nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parsePorts parses a comma-separated list of port numbers.
func parsePorts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%w: --%s: bad port %q", errUsage, flagName, f)
		}
		out = append(out, p)
	}
	return out, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
