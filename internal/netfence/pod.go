package netfence

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// The pod fence: a Kubernetes session pod's first init container runs
// `vak __pod-fence none` as root with NET_ADMIN as its only capability. It
// installs PodTable in the pod's network namespace, which the session
// container shares but, holding no capability, cannot change: an inet
// table (IPv4 and IPv6 alike) whose input, output and forward chains drop
// everything but loopback. It needs no sysctl (a pod's /proc/sys is
// read-only) and no nft binary (netlink, as the other fences).
//
// Mode "none" is the only one so far; a proxied mode will add the
// in-cluster gateway's address as the one other destination.

// PodTable is the pod fence's table (family inet).
const PodTable = "vak_pod"

// PodModes are the pod fence's modes.
var PodModes = []string{"none"}

// PodConfig is what the pod fence installs.
type PodConfig struct {
	// Mode is "none": nothing but loopback.
	Mode string
}

// PodCheck is one probe of the pod fence's self-test.
type PodCheck struct {
	Name string `json:"name"`
	// Want is "blocked" or "open"; Got what happened.
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

// PodReceipt is the pod fence's record of what it installed and tested:
// the init container's termination message, kept by vak with the session.
type PodReceipt struct {
	Mode string `json:"mode"`
	// Table is PodTable; Rules the sha256 of the rules as read back from
	// the kernel (normalized).
	Table  string     `json:"table"`
	Rules  string     `json:"rules_sha256"`
	Checks []PodCheck `json:"checks"`
	Time   time.Time  `json:"time"`
	OK     bool       `json:"ok"`
}

// PodFenceMain is `vak __pod-fence MODE`: FencePod, its receipt (JSON, cut
// to the 4 KiB a termination message keeps) written to out and to the
// file receipt when that exists or can be made (a pod's
// /dev/termination-log). Any failure is an error: the init container
// fails and the pod never starts its workload.
func PodFenceMain(ctx context.Context, mode, receipt string, out io.Writer) error {
	if !slices.Contains(PodModes, mode) {
		return fmt.Errorf("pod fence: mode %q: want one of %s", mode, strings.Join(PodModes, ", "))
	}
	rc, err := FencePod(ctx, PodConfig{Mode: mode})
	if rc != nil {
		data, _ := json.Marshal(rc)
		data = data[:min(len(data), 4000)]
		fmt.Fprintln(out, string(data))
		if receipt != "" {
			if werr := os.WriteFile(receipt, data, 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("pod fence: %w", err)
	}
	return nil
}

// GatewayWait bounds how long the proxied pod self-test waits for the
// gateway to answer (a gateway rolling to a new version, or the node's
// service rules not yet pointing at its new pod): its startup probe allows
// a minute.
const GatewayWait = 30 * time.Second

// untilOK runs check until it passes, pausing every between tries, for at
// most wait (or until ctx ends), and returns the last result, noting how
// many tries it took. Only checks that need the gateway to answer are
// retried: a check that something is blocked is never retried, its first
// failure is final.
func untilOK(ctx context.Context, wait, every time.Duration, check func() PodCheck) PodCheck {
	end := time.Now().Add(wait)
	for n := 1; ; n++ {
		ch := check()
		if ch.OK || time.Now().Add(every).After(end) || ctx.Err() != nil {
			if n > 1 {
				ch.Got += fmt.Sprintf(" (try %d)", n)
			}
			return ch
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}
