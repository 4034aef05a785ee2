package config

import (
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/sandbox/none"
)

func registryForTest() *sandbox.Registry {
	r := sandbox.NewRegistry()
	r.Register(docker.New("x"))
	r.Register(none.Backend{})
	return r
}
