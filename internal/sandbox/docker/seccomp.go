package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"vak/internal/paths"
)

// The docker backend runs every container with Docker's default seccomp
// profile plus vak's rules (SeccompProfile, built in code from the moby
// module's default): no mode change and no file creation that sets the
// setuid or setgid bit. A command that runs as root in its container
// (sandbox.docker.root) could otherwise leave a setuid-root binary in the
// workspace for any local user of the host.

var seccompJSON struct {
	once sync.Once
	data []byte
	err  error
}

// SeccompFile returns the path of a file holding SeccompProfile in vak's
// state directory, under a name derived from its content (the docker CLI
// reads it for `--security-opt seccomp=`). The profile is built once per
// process; the file is checked on every call and written again if it is
// missing or differs.
func SeccompFile() (string, error) {
	buildSeccomp()
	if seccompJSON.err != nil {
		return "", seccompJSON.err
	}
	return writeSeccompFile(seccompJSON.data)
}

// buildSeccomp builds the profile, once per process.
func buildSeccomp() {
	seccompJSON.once.Do(func() {
		seccompJSON.data, seccompJSON.err = SeccompProfile()
	})
}

func writeSeccompFile(data []byte) (string, error) {
	dir, err := paths.EnsureStateDir()
	if err != nil {
		return "", fmt.Errorf("docker: seccomp profile: %w", err)
	}
	sum := sha256.Sum256(data)
	p := filepath.Join(dir, "seccomp-"+hex.EncodeToString(sum[:8])+".json")
	if cur, err := os.ReadFile(p); err == nil && string(cur) == string(data) {
		return p, nil
	}
	tmp, err := os.CreateTemp(dir, ".seccomp-*")
	if err != nil {
		return "", fmt.Errorf("docker: seccomp profile: %w", err)
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), p)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("docker: seccomp profile %s: %w", p, werr)
	}
	return p, nil
}
