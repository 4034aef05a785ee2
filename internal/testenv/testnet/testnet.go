// Package testnet holds the wire types of vak's hermetic test "internet":
// the JSON that scripts/testnet (upstream and canary roles) serves on its
// control port and echoes to clients, and the JSON that `probe bench`
// prints. The programs and the tests that read their output share these
// types so the two cannot drift apart.
package testnet

import "time"

// APIVersion is printed by `testnet version`. It changes whenever the
// command line or the JSON of scripts/testnet changes, so tests can tell a
// stale test image from a current one (see testenv.TestNetImage).
const APIVersion = "testnet/1"

// DefaultControlPort is where both roles serve their control API unless
// --control says otherwise.
const DefaultControlPort = 9999

// ReadyPrefix starts the line each role prints on stdout once every
// listener is bound, e.g. "testnet canary: ready tcp=[...] ...".
const ReadyPrefix = "testnet "

// ReadyWord follows the role name in the ready line.
const ReadyWord = ": ready"

// Counts is what the canary has received since it started or was last
// reset (GET /counts on its control port).
type Counts struct {
	// TCP counts accepted TCP connections on every counted port.
	TCP int64 `json:"tcp"`
	// UDP counts received UDP datagrams on every counted port (DNS queries
	// over UDP included).
	UDP int64 `json:"udp"`
	// DNS counts DNS queries (over UDP or TCP port 53); each is also
	// counted as a UDP datagram or within its TCP connection.
	DNS int64 `json:"dns"`
	// ICMP counts ICMP and ICMPv6 echo requests addressed to the canary
	// (needs CAP_NET_RAW in the canary container, Docker's default; see
	// ICMPError).
	ICMP int64 `json:"icmp"`
	// Total is TCP + UDP + ICMP: anything at all that reached the canary.
	Total int64 `json:"total"`
	// ByPort breaks the counts down: "tcp/443", "udp/53", "dns/53",
	// "icmp", "icmp6".
	ByPort map[string]int64 `json:"by_port"`
	// ICMPError says why ICMP is not counted ("" when it is).
	ICMPError string `json:"icmp_error,omitempty"`
	// Recent lists the latest events (at most RecentMax), oldest first,
	// so a failing test can say who reached the canary and how.
	Recent []Event `json:"recent"`
}

// RecentMax bounds Counts.Recent and Requests.Requests.
const RecentMax = 200

// Event is one thing that reached the canary.
type Event struct {
	Time  time.Time `json:"time"`
	Proto string    `json:"proto"` // tcp, udp, dns, icmp, icmp6
	Port  int       `json:"port,omitempty"`
	From  string    `json:"from"`
	// Name is the queried name for DNS events.
	Name string `json:"name,omitempty"`
}

// Echo is the upstream's JSON description of one request it served. The
// upstream answers most paths with it, and lists the latest ones on its
// control port (GET /requests).
type Echo struct {
	ID       int64               `json:"id"`
	Method   string              `json:"method"`
	Host     string              `json:"host"` // the Host header (:authority in HTTP/2)
	Path     string              `json:"path"`
	RawQuery string              `json:"raw_query"`
	Headers  map[string][]string `json:"headers"`
	// Body holds a UTF-8 request body; BodyBase64 any other body.
	Body       string `json:"body,omitempty"`
	BodyBase64 string `json:"body_base64,omitempty"`
	Proto      string `json:"proto"` // HTTP/1.1, HTTP/2.0
	TLS        bool   `json:"tls"`
	// ServerName is the TLS server name (SNI) the client sent.
	ServerName string `json:"server_name,omitempty"`
	ALPN       string `json:"alpn,omitempty"`
	TLSVersion string `json:"tls_version,omitempty"`
	Remote     string `json:"remote"`
	Local      string `json:"local"`
}

// Requests is the upstream's control-port answer to GET /requests.
type Requests struct {
	// Count is every request served since start or the last reset.
	Count int64 `json:"count"`
	// Requests are the latest ones (at most RecentMax), oldest first.
	Requests []Echo `json:"requests"`
}

// Bench is what `probe bench` prints after "OK " or "FAIL ".
type Bench struct {
	URL         string  `json:"url"`
	N           int     `json:"n"`
	Concurrency int     `json:"concurrency"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Proto       string  `json:"proto"`
	MinMS       float64 `json:"min_ms"`
	MeanMS      float64 `json:"mean_ms"`
	MedianMS    float64 `json:"median_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
	MaxMS       float64 `json:"max_ms"`
	RPS         float64 `json:"rps"`
	ElapsedMS   float64 `json:"elapsed_ms"`
	Bytes       int64   `json:"bytes"`
}
