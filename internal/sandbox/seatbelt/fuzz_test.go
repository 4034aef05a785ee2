package seatbelt

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"vak/internal/sandbox"
)

// listSep separates the elements of a list in a fuzz input.
const listSep = "\x1e"

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, listSep)
}

// FuzzProfile proves that no path, however awkward, can change the structure
// of a profile or leave its string literal:
//
//   - Profile either succeeds or fails with ErrInvalidPolicy, never panics;
//   - the profile reads back strictly (balanced, known symbols, only the
//     escapes quote writes, no control characters);
//   - its token stream, with string contents blanked, is the same as the
//     profile of a "benign" policy whose path components are renamed n0,
//     n1, ... (so the paths' characters decide nothing but string contents);
//   - every string is either the benign profile's string at the same place
//     (a constant) or derived from an input path, and every input path
//     appears intact;
//   - every computed regular expression decodes back to exactly one
//     input-derived path, up to letter case where folding was asked for.
func FuzzProfile(f *testing.F) {
	for _, p := range goldenPolicies() {
		trust, port := "", 0
		if p.Proxy != nil {
			trust, port = p.Proxy.TrustDir, p.Proxy.Port
		}
		f.Add(p.Workspace, p.UserHome, p.TempDir, strings.Join(p.ReadPaths, listSep), strings.Join(p.WritePaths, listSep),
			strings.Join(p.Protected, listSep), strings.Join(p.Deny, listSep), p.Mode == sandbox.WorkspaceWrite, p.AllowNetwork,
			p.AgentHome, trust, port)
	}
	f.Add(`/a"b`, `/a`, `/t\"`, `/r)(allow default)(x "`, "/w\\", `x"y`, `/d\\"`, true, false, `/s/h")(allow default`, `/t"r`, 1)
	f.Add("/ws", "/h", "/t", "/\x1e/h/ok", "/h/a/b", "a/b/c\x1e.git", "/", false, true, "", "", 0)
	f.Fuzz(func(t *testing.T, ws, home, temp, read, write, prot, deny string, wsWrite, network bool, homeDir, trust string, port int) {
		mode := sandbox.ReadOnly
		if wsWrite {
			mode = sandbox.WorkspaceWrite
		}
		var proxy, absProxy *Proxy
		if trust != "" || port != 0 {
			proxy = &Proxy{Port: port, TrustDir: trust}
			absProxy = &Proxy{Port: port, TrustDir: path.Clean("/" + trust)}
		}
		p := Policy{
			Workspace: ws, UserHome: home, TempDir: temp, Mode: mode, AllowNetwork: network,
			ReadPaths: splitList(read), WritePaths: splitList(write), Protected: splitList(prot), Deny: splitList(deny),
			AgentHome: homeDir, Proxy: proxy,
		}
		checkStructure(t, p)
		// The same inputs made absolute and clean, so that the checks below run
		// on far more inputs than the raw ones, which are mostly invalid.
		abs := func(s string) string { return path.Clean("/" + s) }
		absAll := func(ss []string) []string {
			out := make([]string, len(ss))
			for i, s := range ss {
				out[i] = abs(s)
			}
			return out
		}
		relAll := func(ss []string) []string {
			out := make([]string, len(ss))
			for i, s := range ss {
				out[i] = strings.TrimPrefix(abs(s), "/")
			}
			return out
		}
		q := Policy{
			Workspace: abs(ws), UserHome: abs(home), TempDir: abs(temp), Mode: mode, AllowNetwork: network,
			ReadPaths: absAll(p.ReadPaths), WritePaths: absAll(p.WritePaths), Protected: relAll(p.Protected), Deny: absAll(p.Deny),
			Proxy: absProxy,
		}
		if homeDir != "" {
			q.AgentHome = abs(homeDir)
		}
		checkStructure(t, q)
	})
}

// checkStructure runs the fuzz target's checks on one policy.
func checkStructure(t *testing.T, p Policy) {
	t.Helper()
	prof, err := Profile(p)
	if err != nil {
		if !errors.Is(err, ErrInvalidPolicy) {
			t.Fatalf("error %v does not wrap ErrInvalidPolicy", err)
		}
		return
	}
	forms, err := parseSBPL(prof)
	if err != nil {
		t.Fatalf("profile does not read back: %v\n%s", err, prof)
	}
	if _, err := rulesOf(forms); err != nil {
		t.Fatalf("profile has a malformed rule: %v", err)
	}

	b, names := benign(p)
	bprof, err := Profile(b)
	if err != nil {
		t.Fatalf("benign policy %+v rejected: %v", b, err)
	}
	bforms, err := parseSBPL(bprof)
	if err != nil {
		t.Fatalf("benign profile does not read back: %v", err)
	}
	if got, want := shape(forms), shape(bforms); got != want {
		t.Fatalf("profile structure depends on path contents:\n%s\nbenign:\n%s", prof, bprof)
	}

	derived := derivedPaths(p)
	strs, bstrs := stringsOf(forms, ""), stringsOf(bforms, "")
	seen := map[string]bool{}
	for i, s := range strs {
		seen[s.val] = true
		if s.val == bstrs[i].val {
			continue // a constant
		}
		switch s.head {
		case "literal", "subpath":
			if !slices.Contains(derived, s.val) {
				t.Fatalf("%s %q is neither a constant nor derived from the policy", s.head, s.val)
			}
			if !renamesTo(s.val, bstrs[i].val, names) {
				t.Fatalf("%s %q does not rename to the benign profile's %q", s.head, s.val, bstrs[i].val)
			}
		case "regex":
			if err := checkRegex(s.val, derived); err != nil {
				t.Fatalf("regex %q: %v", s.val, err)
			}
		default:
			t.Fatalf("unexpected string %q in %s", s.val, s.head)
		}
	}
	for _, in := range inputPaths(p) {
		if !seen[in] {
			t.Fatalf("input path %q does not appear intact in the profile", in)
		}
	}
}

// inputPaths are the absolute paths a policy names.
func inputPaths(p Policy) []string {
	in := []string{p.Workspace, p.TempDir, p.UserHome}
	in = append(in, p.ReadPaths...)
	in = append(in, p.WritePaths...)
	in = append(in, p.Deny...)
	if p.AgentHome != "" {
		in = append(in, p.AgentHome)
	}
	if p.Proxy != nil {
		in = append(in, p.Proxy.TrustDir)
	}
	for _, r := range append(slices.Clone(AlwaysProtected), p.Protected...) {
		in = append(in, p.Workspace+"/"+r)
	}
	return in
}

// derivedPaths are the paths a profile may name because of p: its inputs,
// their ancestors and their data-volume aliases.
func derivedPaths(p Policy) []string {
	var out []string
	for _, q := range append(inputPaths(p), alwaysDeny...) {
		out = append(out, q, path.Join(dataVolume, q))
		out = append(out, ancestors(q)...)
	}
	return append(out, "/")
}

type sbplString struct{ head, val string }

// stringsOf lists every string in forms with the head of the list holding it.
func stringsOf(forms []*sexpr, head string) []sbplString {
	var out []sbplString
	for _, f := range forms {
		switch {
		case f.isList:
			out = append(out, stringsOf(f.list, f.head())...)
		case f.isStr:
			out = append(out, sbplString{head, f.str})
		}
	}
	return out
}

// shape renders forms with every string blanked.
func shape(forms []*sexpr) string {
	var b strings.Builder
	for _, f := range forms {
		switch {
		case f.isList:
			b.WriteString("(" + shape(f.list) + ")")
		case f.isStr && f.raw:
			b.WriteString(`#"` + f.str + `" `) // raw strings are constants
		case f.isStr:
			b.WriteString(`"" `)
		default:
			b.WriteString(f.sym + " ")
		}
	}
	return b.String()
}

// benign renames every path component of p to n0, n1, ... (the same name for
// the same component), keeping every relation between the paths.
func benign(p Policy) (Policy, map[string]string) {
	names := map[string]string{}
	// Components of the constant paths the profile deduplicates against keep
	// their names, so that equality with those constants is kept too.
	for _, q := range append(slices.Clone(AlwaysProtected), alwaysDeny...) {
		for _, c := range strings.Split(q, "/") {
			if c != "" {
				names[c] = c
			}
		}
	}
	for _, q := range inputPaths(p) {
		for _, c := range strings.Split(q, "/") {
			if _, ok := names[c]; !ok && c != "" {
				names[c] = fmt.Sprintf("n%d", len(names))
			}
		}
	}
	for _, r := range p.Protected {
		for _, c := range strings.Split(r, "/") {
			if _, ok := names[c]; !ok {
				names[c] = fmt.Sprintf("n%d", len(names))
			}
		}
	}
	ren := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = renamePath(s, names)
		}
		return out
	}
	b := p
	b.Workspace, b.UserHome, b.TempDir = renamePath(p.Workspace, names), renamePath(p.UserHome, names), renamePath(p.TempDir, names)
	b.ReadPaths, b.WritePaths, b.Deny, b.Protected = ren(p.ReadPaths), ren(p.WritePaths), ren(p.Deny), ren(p.Protected)
	if p.AgentHome != "" {
		b.AgentHome = renamePath(p.AgentHome, names)
	}
	if p.Proxy != nil {
		b.Proxy = &Proxy{Port: p.Proxy.Port, TrustDir: renamePath(p.Proxy.TrustDir, names)}
	}
	return b, names
}

// renamePath renames the components of an absolute or relative path.
func renamePath(q string, names map[string]string) string {
	cs := strings.Split(q, "/")
	for i, c := range cs {
		if n, ok := names[c]; ok {
			cs[i] = n
		}
	}
	return strings.Join(cs, "/")
}

// renamesTo reports whether the profile path q corresponds to the benign
// profile's path b: renamed whole, or as a data-volume alias whose constant
// prefix stays.
func renamesTo(q, b string, names map[string]string) bool {
	if renamePath(q, names) == b {
		return true
	}
	rest, ok := strings.CutPrefix(q, dataVolume)
	return ok && (rest == "" || strings.HasPrefix(rest, "/")) && path.Join(dataVolume, renamePath(rest, names)) == b
}

// checkRegex decodes a computed regular expression and checks that it is
// well formed and matches exactly one of the derived paths (up to case where
// it folds), and that Go's regexp agrees.
func checkRegex(re string, derived []string) error {
	sets, tail, err := decodeRegex(re)
	if err != nil {
		return err
	}
	for _, d := range derived {
		rs := []rune(d)
		if len(rs) != len(sets) {
			continue
		}
		ok := true
		for i, r := range rs {
			ok = ok && slices.Contains(sets[i], r)
		}
		if !ok {
			continue
		}
		c, err := regexp.Compile(re)
		if err != nil {
			return err
		}
		if !c.MatchString(d) {
			return fmt.Errorf("does not match %q, which it decodes to", d)
		}
		switch tail {
		case "(/|$)":
			if !c.MatchString(d+"/x") || c.MatchString(d+"x") {
				return fmt.Errorf("is not exactly the tree at %q", d)
			}
		case "$":
			if c.MatchString(d+"/x") || c.MatchString(d+"x") {
				return fmt.Errorf("matches more than %q", d)
			}
		}
		return nil
	}
	return errors.New("matches no path derived from the policy")
}

// decodeRegex reads the regular expressions Profile computes: "^", then
// literal runes, backslash-escaped metacharacters, and case classes ([Gg] or
// (K|k|K)), then "$", "(/|$)", or nothing for "^/". It returns, for each
// position, the runes that match there.
func decodeRegex(re string) (sets [][]rune, tail string, err error) {
	rest, ok := strings.CutPrefix(re, "^")
	if !ok {
		return nil, "", errors.New("not anchored")
	}
	if rest == "/" {
		return [][]rune{{'/'}}, "", nil
	}
	rs := []rune(rest)
	for i := 0; i < len(rs); {
		switch r := rs[i]; {
		case string(rs[i:]) == "(/|$)" || string(rs[i:]) == "$":
			return sets, string(rs[i:]), nil
		case r == '\\':
			if i+1 >= len(rs) || !strings.ContainsRune(regexMeta, rs[i+1]) {
				return nil, "", fmt.Errorf("bad escape at %d", i)
			}
			sets, i = append(sets, []rune{rs[i+1]}), i+2
		case r == '[' || r == '(':
			closer, sep := ']', ""
			if r == '(' {
				closer, sep = ')', "|"
			}
			end := slices.Index(rs[i:], closer)
			if end < 0 {
				return nil, "", fmt.Errorf("unclosed %c at %d", r, i)
			}
			body := string(rs[i+1 : i+end])
			var class []rune
			if sep == "" {
				class = []rune(body)
			} else {
				for _, alt := range strings.Split(body, sep) {
					if a := []rune(alt); len(a) == 1 {
						class = append(class, a[0])
					} else {
						return nil, "", fmt.Errorf("alternative %q is not one rune", alt)
					}
				}
			}
			if len(class) < 2 || !slices.Equal(caseVariants(class[0]), class) {
				return nil, "", fmt.Errorf("class %q is not the case variants of one letter", body)
			}
			sets, i = append(sets, class), i+end+1
		case strings.ContainsRune(regexMeta, r):
			return nil, "", fmt.Errorf("unescaped %q at %d", r, i)
		default:
			sets, i = append(sets, []rune{r}), i+1
		}
	}
	return nil, "", errors.New("no tail")
}
