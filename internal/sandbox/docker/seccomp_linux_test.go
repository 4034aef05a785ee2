package docker

import (
	"encoding/json"
	"os"
	"testing"
)

// The profile allows the calls that set a mode only with a condition that
// excludes the setuid and setgid bits, never unconditionally, and otherwise
// keeps Docker's default (spot checks; openat2 stays allowed).
func TestSeccompProfile(t *testing.T) {
	data, err := SeccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
			Args   []struct {
				Index, Value, ValueTwo uint64
				Op                     string
			} `json:"args"`
			Includes json.RawMessage `json:"includes"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Errorf("default action %q", p.DefaultAction)
	}
	guarded := map[string]bool{}
	for _, m := range modeSyscalls {
		guarded[m.name] = true
	}
	conditional := map[string]int{}
	allowed := map[string]bool{}
	for _, sc := range p.Syscalls {
		for _, n := range sc.Names {
			if sc.Action == "SCMP_ACT_ALLOW" {
				allowed[n] = true
			}
			if !guarded[n] {
				continue
			}
			if sc.Action == "SCMP_ACT_ALLOW" && len(sc.Args) == 0 {
				t.Errorf("%s is allowed unconditionally", n)
			}
			for _, a := range sc.Args {
				if a.Op != "SCMP_CMP_MASKED_EQ" || a.ValueTwo != 0 {
					t.Errorf("%s: unexpected condition %+v", n, a)
				}
				conditional[n]++
			}
		}
	}
	for _, m := range modeSyscalls {
		want := 1
		if m.flags >= 0 {
			want = 2
		}
		if conditional[m.name] != want {
			t.Errorf("%s has %d conditional rules, want %d", m.name, conditional[m.name], want)
		}
	}
	for _, n := range []string{"read", "write", "execve", "clone", "mkdirat", "unlinkat", "renameat2", "openat2"} {
		if !allowed[n] {
			t.Errorf("Docker's default allows %s; the profile does not", n)
		}
	}
	// The file is written again when it disappears.
	path, err := SeccompFile()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if again, err := SeccompFile(); err != nil || again != path {
		t.Fatalf("SeccompFile after removal: %q %v", again, err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(data) {
		t.Error("the profile file does not hold the profile")
	}
}
