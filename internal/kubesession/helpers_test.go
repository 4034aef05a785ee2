//go:build kubernetes

package kubesession

import (
	"testing"

	"k8s.io/client-go/rest"
)

func mustCluster(t testing.TB, cfg *rest.Config, ns string) *Cluster {
	t.Helper()
	c, err := NewCluster(cfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
