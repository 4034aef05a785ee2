package netfence

import (
	"context"
	"strings"
	"testing"
	"time"
)

// untilOK retries a check that needs the gateway until it passes, noting
// the try, and gives up with the last failure once the wait is over.
func TestUntilOK(t *testing.T) {
	n := 0
	flaky := func() PodCheck {
		n++
		return PodCheck{Name: "gw", Want: "open", Got: "connection refused", OK: n >= 3}
	}
	ch := untilOK(context.Background(), time.Minute, time.Millisecond, flaky)
	if !ch.OK || n != 3 || !strings.HasSuffix(ch.Got, "(try 3)") {
		t.Errorf("flaky: %+v after %d tries", ch, n)
	}
	n = 0
	first := untilOK(context.Background(), time.Minute, time.Millisecond, func() PodCheck { n++; return PodCheck{OK: true, Got: "connected"} })
	if n != 1 || first.Got != "connected" {
		t.Errorf("a passing check: %+v after %d tries", first, n)
	}
	never := untilOK(context.Background(), 50*time.Millisecond, 5*time.Millisecond, func() PodCheck { return PodCheck{Got: "connection refused"} })
	if never.OK || !strings.Contains(never.Got, "connection refused (try ") {
		t.Errorf("a failing check: %+v", never)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n = 0
	untilOK(ctx, time.Minute, time.Millisecond, func() PodCheck { n++; return PodCheck{} })
	if n != 1 {
		t.Errorf("an ended context: %d tries", n)
	}
}
