package admin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"vak/internal/egress/asks"
	"vak/internal/egress/policy"
)

// askCtl is a Controller holding a real asks registry (off: nil).
type askCtl struct {
	fakeCtl
	reg *asks.Registry
}

var errOff = errors.New("asking is off")

func (c *askCtl) Asks() ([]asks.Ask, error) {
	if c.reg == nil {
		return nil, errOff
	}
	return c.reg.Pending(), nil
}

func (c *askCtl) FollowAsks(ctx context.Context, fn func(asks.Event) error) error {
	if c.reg == nil {
		return errOff
	}
	return c.reg.Follow(ctx, fn)
}

func (c *askCtl) AnswerAsk(id string, a asks.Answer) error {
	if c.reg == nil {
		return errOff
	}
	return c.reg.Answer(id, a)
}

// The ask API: list, follow, allow and deny over the socket; the answer
// names the peer (uid, pid); unknown IDs, unknown scopes and asking off
// are errors the client passes on.
func TestAskAPI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctl := &askCtl{reg: asks.New(asks.Options{Timeout: time.Minute})}
	srv := Serve(l, ctl)
	defer srv.Close()
	c := NewClient(path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	events := make(chan asks.Event, 8)
	followed := make(chan error, 1)
	go func() { followed <- c.FollowAsks(ctx, func(e asks.Event) error { events <- e; return nil }) }()

	req := policy.Request{Proto: policy.ProtoHTTP, Host: policy.Host{Name: "unlisted.test"}, Port: 443, Method: "GET", Path: "/a"}
	result := make(chan string, 1)
	go func() {
		ok, why := ctl.reg.Ask(ctx, req)
		result <- strconv.FormatBool(ok) + " " + why
	}()
	e := <-events
	if e.Kind != "ask" || e.Ask.Host != "unlisted.test" || e.Ask.Path != "/a" {
		t.Fatalf("followed event %+v", e)
	}
	list, err := c.Asks(ctx)
	if err != nil || len(list) != 1 || list[0].ID != e.Ask.ID {
		t.Fatalf("Asks = %+v, %v", list, err)
	}
	if _, err := c.AnswerAsk(ctx, e.Ask.ID, true, "forever", ""); err == nil || !strings.Contains(err.Error(), "scope") {
		t.Fatalf("an unknown scope: %v", err)
	}
	if _, err := c.AnswerAsk(ctx, "00000000", true, asks.Once, ""); err == nil || !strings.Contains(err.Error(), "no such pending ask") {
		t.Fatalf("an unknown ID: %v", err)
	}
	ans, err := c.AnswerAsk(ctx, e.Ask.ID, true, asks.Once, "")
	want := "admin socket, uid " + strconv.Itoa(os.Getuid()) + ", pid " + strconv.Itoa(os.Getpid())
	if err != nil || !ans.Allow || ans.By != want {
		t.Fatalf("AnswerAsk = %+v, %v; want By %q", ans, err, want)
	}
	if got := <-result; !strings.HasPrefix(got, "true allowed once by ask "+e.Ask.ID+" ("+want+")") {
		t.Fatalf("the held request: %s", got)
	}
	if e := <-events; e.Kind != "answered" || e.Answer == nil || e.Answer.By != want {
		t.Fatalf("followed answer %+v", e)
	}
	cancel()
	if err := <-followed; err != nil {
		t.Fatalf("FollowAsks after cancel: %v", err)
	}

	ctl.reg = nil
	if _, err := c.Asks(context.Background()); err == nil || !strings.Contains(err.Error(), "asking is off") {
		t.Fatalf("asking off: %v", err)
	}
	if err := c.FollowAsks(context.Background(), func(asks.Event) error { return nil }); err == nil || !strings.Contains(err.Error(), "asking is off") {
		t.Fatalf("follow with asking off: %v", err)
	}
}
