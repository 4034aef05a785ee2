package ondemand

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The env stamp records, for the gateway last started, a random key and
// per secret environment variable HMAC-SHA256(key, value): enough to tell
// whether a run's environment holds the same values, and nothing that
// reveals them (the file is 0600 in the 0700 gateway directory anyway).
//
//	key <hex>
//	env NAME <hex>

func envDigest(key []byte, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(value))
	return hex.EncodeToString(m.Sum(nil))
}

// writeEnvStamp records env (NAME -> value) at path, atomically.
func writeEnvStamp(path string, env map[string]string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "key %s\n", hex.EncodeToString(key))
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "env %s %s\n", n, envDigest(key, env[n]))
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".env.stamp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// staleEnv returns the names (sorted) whose value in env differs from the
// running gateway's, per its stamp: a variable on one side only counts as
// different. A missing or unreadable stamp (a gateway started by an older
// vak) makes every name in env stale, or a "(unknown)" marker when env is
// empty, so such a gateway is restarted when it can be.
func staleEnv(p Paths, env map[string]string) []string {
	f, err := os.Open(p.EnvStamp)
	if err != nil {
		return unknownStamp(env)
	}
	defer f.Close()
	var key []byte
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 2 && fields[0] == "key":
			if key, err = hex.DecodeString(fields[1]); err != nil {
				return unknownStamp(env)
			}
		case len(fields) == 3 && fields[0] == "env":
			got[fields[1]] = fields[2]
		default:
			return unknownStamp(env)
		}
	}
	if sc.Err() != nil || len(key) == 0 {
		return unknownStamp(env)
	}
	var stale []string
	for n, v := range env {
		if d, ok := got[n]; !ok || !hmac.Equal([]byte(d), []byte(envDigest(key, v))) {
			stale = append(stale, n)
		}
	}
	for n := range got {
		if _, ok := env[n]; !ok {
			stale = append(stale, n)
		}
	}
	sort.Strings(stale)
	return stale
}

func unknownStamp(env map[string]string) []string {
	if len(env) == 0 {
		return []string{"(variables not recorded by the vak that started it)"}
	}
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
