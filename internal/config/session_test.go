package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"vak/internal/dockerd"
	"vak/internal/sandbox/docker"
	"vak/internal/taskenv"
)

// The defaults config states as literals equal the backends' own.
func TestDefaultsMatchBackends(t *testing.T) {
	if DefaultImage != docker.DefaultImage || DefaultSessionIdleTimeout != taskenv.DefaultIdleTimeout ||
		DefaultSessionMaxLifetime != taskenv.DefaultMaxLifetime || DefaultSessionPolicyGeneration != taskenv.DefaultPolicyGeneration {
		t.Fatal("config defaults drifted from internal/sandbox/docker's")
	}
	if !reflect.DeepEqual(DockerRuntimes, dockerd.RuntimeChoices) || Default().Session.DockerRuntime != dockerd.RuntimeAuto {
		t.Fatalf("session.docker_runtime values %v (default %q) drifted from dockerd's %v", DockerRuntimes, Default().Session.DockerRuntime, dockerd.RuntimeChoices)
	}
}

func TestSessionDefaults(t *testing.T) {
	s := Default().Session
	if s.IdleTimeout != taskenv.DefaultIdleTimeout || s.MaxLifetime != taskenv.DefaultMaxLifetime || s.PoolSize != 0 ||
		s.AllowInstall || s.Worker != "" || s.PolicyGeneration != taskenv.DefaultPolicyGeneration {
		t.Fatalf("defaults = %+v", s)
	}
}

func TestSessionConfig(t *testing.T) {
	cfg, err := Parse("user.toml", []byte(`version = 1
[session]
idle_timeout = "10m"
max_lifetime = "2h"
pool_size = 3
allow_install = true
worker = "/opt/vak/vak"
policy_generation = "2025-01.b"
run_network_idle = "0"
docker = true
docker_placeholders = ["TOKEN", "B_2", "TOKEN"]
docker_runtime = "runc"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Session{IdleTimeout: 10 * time.Minute, MaxLifetime: 2 * time.Hour, PoolSize: 3, AllowInstall: true, Worker: "/opt/vak/vak", PolicyGeneration: "2025-01.b", RunNetworkIdle: 0, Docker: true, DockerPlaceholders: []string{"TOKEN", "B_2"}, DockerRuntime: "runc", Backend: "docker"}
	if !reflect.DeepEqual(cfg.Session, want) {
		t.Fatalf("session = %+v", cfg.Session)
	}
}

func TestSessionConfigInvalid(t *testing.T) {
	for _, tc := range []struct{ body, key string }{
		{`idle_timeout = "soon"`, "session.idle_timeout"},
		{`idle_timeout = "0s"`, "session.idle_timeout"},
		{`max_lifetime = "-1h"`, "session.max_lifetime"},
		{`max_lifetime = "9999h"`, "session.max_lifetime"},
		{"idle_timeout = \"2h\"\nmax_lifetime = \"1h\"", "session.idle_timeout"},
		{`pool_size = -1`, "session.pool_size"},
		{`pool_size = 17`, "session.pool_size"},
		{`worker = "relative/vak"`, "session.worker"},
		{`policy_generation = ""`, "session.policy_generation"},
		{`policy_generation = "a b"`, "session.policy_generation"},
		{`pool = 1`, "session.pool"},
		{`docker = "yes"`, "session.docker"},
		{`allow_install = "yes"`, "session.allow_install"},
		{`run_network_idle = "-1m"`, "session.run_network_idle"},
		{`run_network_idle = "later"`, "session.run_network_idle"},
		{`docker_placeholders = ["A-B"]`, "session.docker_placeholders"},
		{`docker_placeholders = [""]`, "session.docker_placeholders"},
		{`docker_placeholders = "TOKEN"`, "session.docker_placeholders"},
		{`docker_runtime = "crun"`, "session.docker_runtime"},
		{`docker_runtime = ""`, "session.docker_runtime"},
		{`docker_runtime = "Sysbox"`, "session.docker_runtime"},
		{`docker_runtime = true`, "session.docker_runtime"},
	} {
		_, err := Parse("user.toml", []byte("version = 1\n[session]\n"+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "user.toml") {
			t.Errorf("%s: %v (want an error naming %s and the file)", tc.body, err, tc.key)
		}
	}
}

// [session] is privileged: a project config cannot set any of it.
func TestSessionConfigUntrusted(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "user.toml"), "version = 1\n[session]\npool_size = 1\n")
	ws := filepath.Join(dir, "ws")
	write(t, filepath.Join(ws, ".vak", "config.toml"), `version = 1
[session]
idle_timeout = "1000h"
max_lifetime = "720h"
pool_size = 16
allow_install = true
worker = "/tmp/evil"
policy_generation = "0"
run_network_idle = "100h"
docker = true
docker_placeholders = ["TOKEN"]
docker_runtime = "sysbox"
`)
	cfg, err := Load(Options{UserFile: user, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultSession()
	want.PoolSize = 1
	if !reflect.DeepEqual(cfg.Session, want) {
		t.Fatalf("project config changed [session]: %+v", cfg.Session)
	}
	warn := strings.Join(cfg.Warnings, "\n")
	for _, k := range []string{"idle_timeout", "max_lifetime", "pool_size", "allow_install", "worker", "policy_generation", "run_network_idle", "docker", "docker_placeholders", "docker_runtime"} {
		if !strings.Contains(warn, "ignoring session."+k+":") {
			t.Errorf("no warning for session.%s:\n%s", k, warn)
		}
	}
}
