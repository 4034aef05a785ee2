package agentnet

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteEdges(t *testing.T) {
	tests := []struct {
		name string
		es   []EdgeStatus
		want []string
	}{
		{"none", nil, []string{"WORKSPACE A"}},
		{"up and down", []EdgeStatus{{A: "/a", B: "/b", Up: true, Reason: "both registered"}, {A: "/a", B: "/c", Reason: "/c not registered"}},
			[]string{"/a  ", "up  ", "both registered", "down", "/c not registered"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteEdges(&b, tc.es); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(b.String(), "\n"); n != len(tc.es)+1 {
				t.Fatalf("%d lines, want %d:\n%s", n, len(tc.es)+1, b.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
		})
	}
}
