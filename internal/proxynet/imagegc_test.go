package proxynet

import (
	"testing"
	"time"

	"github.com/moby/moby/api/types/image"
)

func TestPlanImageGC(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-48 * time.Hour).Unix()
	o := ImageGCOptions{Repos: []string{"vak-net", "vak-dockerd"}, Keep: []string{"vak-net:cur", "vak-dockerd:recipe"}}
	imgs := []image.Summary{
		{RepoTags: []string{"vak-net:old"}, Created: old, Size: 10},
		{RepoTags: []string{"vak-net:cur"}, Created: old},
		{RepoTags: []string{"vak-net:alias", "vak-net:cur2", "vak-net:devcontainer"}, Created: old},
		{RepoTags: []string{"vak-dockerd:recipe", "vak-dockerd:olderalias"}, Created: old},
		{RepoTags: []string{"vak-dockerd:stale"}, Created: old},
		{RepoTags: []string{"vak-net:young"}, Created: now.Add(-time.Minute).Unix()},
		{RepoTags: []string{"other:old", "vak-network:x"}, Created: old},
		{RepoTags: []string{"<none>:<none>"}, Created: old},
	}
	want := map[string]string{
		"vak-net:old":            "",
		"vak-net:cur":            "used by this vak",
		"vak-net:alias":          "named by dev-container projects",
		"vak-net:cur2":           "named by dev-container projects",
		"vak-net:devcontainer":   "named by dev-container projects",
		"vak-dockerd:recipe":     "used by this vak",
		"vak-dockerd:olderalias": "used by this vak",
		"vak-dockerd:stale":      "",
		"vak-net:young":          "younger than 1h0m0s",
	}
	got := PlanImageGC(imgs, o, now)
	if len(got) != len(want) {
		t.Fatalf("plan has %d tags, want %d: %+v", len(got), len(want), got)
	}
	for i, r := range got {
		w, ok := want[r.Tag]
		if !ok {
			t.Errorf("unexpected tag %s in plan", r.Tag)
		} else if r.Reason != w {
			t.Errorf("%s: reason %q, want %q", r.Tag, r.Reason, w)
		}
		if i > 0 && got[i-1].Tag >= r.Tag {
			t.Errorf("plan not sorted at %s", r.Tag)
		}
	}
	// A grace of its own.
	o.Grace = 30 * time.Second
	for _, r := range PlanImageGC(imgs, o, now) {
		if r.Tag == "vak-net:young" && r.Reason != "" {
			t.Errorf("with a 30 s grace a 1 min old image is removable, got %q", r.Reason)
		}
	}
}
