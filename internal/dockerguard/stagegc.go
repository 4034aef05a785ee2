package dockerguard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
)

// reserve names the next staged source and holds it for the request of
// ctx before it exists, so a concurrent sweep leaves it alone; the
// request's release removes it if the create goes no further.
func (g *Guard) reserve(ctx context.Context) string {
	p := filepath.Join(g.p.StageDir, "b"+strconv.FormatUint(g.stage.n.Add(1), 10))
	g.hold(ctx, p)
	return p
}

// hold records that the request of ctx staged p: p is not swept while the
// request is in flight.
func (g *Guard) hold(ctx context.Context, p string) {
	held, _ := ctx.Value(stagedKey{}).(*stagedReq)
	g.stage.mu.Lock()
	defer g.stage.mu.Unlock()
	g.stage.inflight[p]++
	if held != nil {
		held.paths = append(held.paths, p)
	}
}

// release ends a request's hold on what it staged; drop also removes those
// staged sources at once (the request was refused: no container uses them).
func (g *Guard) release(held *stagedReq, drop bool) {
	g.stage.mu.Lock()
	defer g.stage.mu.Unlock()
	for _, p := range held.paths {
		if g.stage.inflight[p]--; g.stage.inflight[p] <= 0 {
			delete(g.stage.inflight, p)
			if drop {
				unstage(p)
			}
		}
	}
	held.paths = nil
}

// sweepStage removes staged sources that no container of the engine uses
// (removed containers, `--rm` ones that ended, creates the engine refused)
// and no request in flight holds. If the engine cannot list its containers,
// nothing is removed.
func (g *Guard) sweepStage(ctx context.Context) {
	u := &url.URL{Scheme: "http", Host: "docker", Path: "/containers/json", RawQuery: "all=1"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return
	}
	res, err := g.client.Do(req)
	if err != nil {
		return
	}
	defer res.Body.Close()
	var list []struct {
		Mounts []struct{ Source string }
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&list) != nil {
		return
	}
	used := map[string]bool{}
	for _, c := range list {
		for _, m := range c.Mounts {
			used[filepath.Clean(m.Source)] = true
		}
	}
	g.stage.mu.Lock()
	defer g.stage.mu.Unlock()
	ents, err := os.ReadDir(g.p.StageDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(g.p.StageDir, e.Name())
		if used[p] || g.stage.inflight[p] > 0 {
			continue
		}
		unstage(p)
	}
}
