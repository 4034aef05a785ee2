// Package origdst reads the destination a locally REDIRECTed TCP connection
// was originally addressed to (Linux netfilter's SO_ORIGINAL_DST). The
// gateway's transparent listener uses it when no PROXY protocol header is
// present, e.g. when nftables in the same network namespace redirects
// traffic to the gateway. The value is a hint: the gateway decides on names.
package origdst

import "errors"

// ErrUnsupported means the platform has no SO_ORIGINAL_DST.
var ErrUnsupported = errors.New("origdst: SO_ORIGINAL_DST is not supported on this platform")

// ErrNotRedirected means the kernel has no original destination for the
// connection (it was not redirected by netfilter).
var ErrNotRedirected = errors.New("origdst: connection was not redirected")
