package seatbelt

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"vak/internal/sandbox"
)

// dataVolume is where the writable data volume (with /Users, /Library,
// /opt, /private/var, ...) is mounted. Its files are reachable through this
// alias as well as through their usual paths, so everything the profile
// closes is closed under both spellings.
const dataVolume = "/System/Volumes/Data"

// The operation sets the profile grants and closes. Reads include mapping a
// file executable (dyld maps libraries and extensions with it), so a closed
// path can be neither read nor mapped.
const (
	opsRead      = "file-read* file-map-executable"
	opsReadWrite = "file-read* file-map-executable file-write*"
)

// alwaysDeny are closed for everything at the very end of every profile,
// after any grant: the machine keychains (System.keychain is world-readable).
var alwaysDeny = []string{"/Library/Keychains"}

// Profile returns the Seatbelt profile (SBPL text) for p, or an error
// wrapping ErrInvalidPolicy that names the field at fault. It is pure: it
// reads no files, and the same Policy always gives the same text.
func Profile(p Policy) (string, error) {
	pl, err := p.plan()
	if err != nil {
		return "", err
	}
	w := &writer{}
	w.header(pl)
	w.basics()
	w.system()
	w.broadGrants(pl)
	w.closeHome(pl)
	w.grants(pl)
	w.network(pl)
	w.protected(pl)
	w.deny(pl)
	return w.b.String(), nil
}

// filter is one SBPL filter expression with an optional constant comment.
// Comments never contain anything from a Policy.
type filter struct{ expr, note string }

func fl(expr string) filter { return filter{expr: expr} }

func literal(p string) filter { return fl("(literal " + quote(p) + ")") }
func subpath(p string) filter { return fl("(subpath " + quote(p) + ")") }
func regex(re string) filter  { return fl("(regex " + quote(re) + ")") }

// quote returns s as an SBPL string literal. SBPL is read by TinyScheme, in
// whose strings exactly two characters are special: the quote, which ends
// the string, and the backslash, which starts every escape. Escaping both
// is therefore enough for any string without control characters (which
// Policy validation rejects); every other byte, UTF-8 included, stands for
// itself.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// regexMeta are the characters special to Seatbelt's (POSIX extended)
// regular expressions; regexQuote escapes each with a backslash.
const regexMeta = `\.^$*+?()[]{}|`

// regexQuote returns a regular expression matching exactly s. With fold,
// every letter also matches its other cases (Unicode simple case folding),
// the way a case-insensitive APFS volume resolves names.
func regexQuote(s string, fold bool) string {
	var b strings.Builder
	for _, r := range s {
		if fold {
			if vs := caseVariants(r); len(vs) > 1 {
				writeVariants(&b, vs)
				continue
			}
		}
		if r < utf8.RuneSelf && strings.ContainsRune(regexMeta, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// caseVariants returns r and every rune that folds to the same case class,
// sorted.
func caseVariants(r rune) []rune {
	vs := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		vs = append(vs, f)
	}
	slices.Sort(vs)
	return vs
}

// writeVariants writes a bracket expression ([Gg]) when every variant is a
// single byte, and a group ((k|K|K)) otherwise, so that multi-byte UTF-8
// sequences are matched whole by a byte-oriented matcher.
func writeVariants(b *strings.Builder, vs []rune) {
	ascii := true
	for _, v := range vs {
		ascii = ascii && v < utf8.RuneSelf
	}
	open, sep, close := "(", "|", ")"
	if ascii {
		open, sep, close = "[", "", "]"
	}
	b.WriteString(open)
	for i, v := range vs {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteRune(v)
	}
	b.WriteString(close)
}

// treeRegex matches p and everything under it, in any letter case.
func treeRegex(p string) string {
	if p == "/" {
		return "^/"
	}
	return "^" + regexQuote(p, true) + "(/|$)"
}

// closed returns the filters that match p and everything under it, under
// both of its spellings and in any letter case.
func closed(p string) []filter {
	alias := path.Join(dataVolume, p)
	return []filter{subpath(p), subpath(alias), regex(treeRegex(p)), regex(treeRegex(alias))}
}

type writer struct{ b strings.Builder }

func (w *writer) comment(lines ...string) {
	w.b.WriteByte('\n')
	for _, l := range lines {
		w.b.WriteString(";; " + l + "\n")
	}
}

// rule writes (head filters...). Rules with several filters, or with a
// commented filter, put each filter on its own line and the closing
// parenthesis on a line of its own, so a comment can never swallow it.
func (w *writer) rule(head string, fs ...filter) {
	fs = dedupFilters(fs)
	switch {
	case len(fs) == 0:
		w.b.WriteString("(" + head + ")\n")
		return
	case len(fs) == 1 && fs[0].note == "":
		w.b.WriteString("(" + head + " " + fs[0].expr + ")\n")
		return
	}
	w.b.WriteString("(" + head + "\n")
	for _, f := range fs {
		w.b.WriteString("    " + f.expr)
		if f.note != "" {
			w.b.WriteString(" ; " + f.note)
		}
		w.b.WriteByte('\n')
	}
	w.b.WriteString(")\n")
}

func dedupFilters(fs []filter) []filter {
	seen := make(map[string]bool, len(fs))
	out := fs[:0:0]
	for _, f := range fs {
		if !seen[f.expr] {
			seen[f.expr] = true
			out = append(out, f)
		}
	}
	return out
}

func (w *writer) header(pl *plan) {
	w.b.WriteString("(version 1)\n")
	net := "network denied"
	switch {
	case pl.p.AllowNetwork:
		net = "network allowed"
	case pl.p.Proxy != nil:
		net = "network proxied through the local gateway"
	}
	w.comment(
		"vak seatbelt profile (generated by vak/internal/sandbox/seatbelt; do not edit).",
		"Mode "+pl.p.Mode.String()+", "+net+".",
		"Seatbelt applies the last rule that matches, so each section may narrow the ones above it.",
	)
	w.b.WriteString("(deny default)\n")
}

func (w *writer) basics() {
	w.comment("Processes: the sandboxed tree may fork and exec (children inherit this profile),",
		"and may signal and inspect its own members, nothing else.")
	w.rule("allow process-fork")
	w.rule("allow process-exec")
	w.rule("allow signal", fl("(target same-sandbox)"))
	w.rule("allow process-info*", fl("(target same-sandbox)"))

	w.comment("Kernel state: sysctl reads (CPU count, OS version, page size, ...), except the",
		"argument vectors of other processes, which can carry secrets.")
	w.rule("allow sysctl-read")
	w.rule("deny sysctl-read", fl(`(sysctl-name "kern.procargs")`), fl(`(sysctl-name "kern.procargs2")`))
	w.comment("The JVM reads its CPU type through a sysctl write; libuv's os.cpus() asks the host port.")
	w.rule("allow sysctl-write", fl(`(sysctl-name "kern.grade_cputype")`))
	w.rule("allow mach-host*")

	w.comment("Mach services: only those libSystem needs to run a toolchain. Never the keychain",
		"(SecurityServer), preferences (cfprefsd reads ~/Library for its client), pasteboard,",
		"LaunchServices or launchd job submission (each would reach outside the sandbox).")
	w.rule("allow mach-lookup",
		filter{`(global-name "com.apple.system.opendirectoryd.libinfo")`, "user and group lookups (getpwuid, getgrgid)"},
		filter{`(global-name "com.apple.system.opendirectoryd.membership")`, "group membership checks"},
		filter{`(global-name "com.apple.system.notification_center")`, "notify(3): time zone and lookup-cache changes"},
		filter{`(global-name "com.apple.system.logger")`, "asl and syslog(3)"},
		filter{`(global-name "com.apple.logd")`, "os_log"},
		filter{`(global-name "com.apple.bsd.dirhelper")`, "confstr(_CS_DARWIN_USER_TEMP_DIR) and friends"},
	)
	w.rule("allow ipc-posix-shm-read*", filter{`(ipc-posix-name "apple.shm.notification_center")`, "notify(3) fast path"})
	w.rule("allow ipc-posix-sem")

	w.comment("Devices: the null and zero devices, entropy, the process's own descriptors, and",
		"the controlling terminal without ioctl (TIOCSTI could type into the user's shell).",
		"Pseudo-terminals only when created inside the sandbox (they carry the pty extension).")
	w.rule("allow file-read* file-write-data",
		literal("/dev/null"), literal("/dev/zero"), subpath("/dev/fd"), literal("/dev/tty"))
	w.rule("allow file-read*",
		literal("/dev/random"), literal("/dev/urandom"), literal("/dev/autofs_nowait"),
		literal("/dev/stdin"), literal("/dev/stdout"), literal("/dev/stderr"))
	w.rule("allow file-read-metadata", literal("/dev"))
	w.rule("allow pseudo-tty")
	w.rule("allow file-read* file-write-data file-ioctl", literal("/dev/ptmx"))
	w.rule("allow file-read* file-write-data file-ioctl",
		fl(`(require-all (regex #"^/dev/ttys[0-9]+$") (extension "com.apple.sandbox.pty"))`))
}

func (w *writer) system() {
	w.comment("System files a toolchain reads: the root directory itself (dyld reads it),",
		"executables, libraries and frameworks (the sealed system volume), /Library (the",
		"machine's, not ~/Library), Homebrew, /etc, time zones, the shell and developer-dir",
		"selectors, and Xcode.")
	w.rule("allow "+opsRead,
		literal("/"),
		subpath("/bin"), subpath("/sbin"), subpath("/usr"),
		subpath("/System"), subpath("/Library"), subpath("/opt/homebrew"),
		subpath("/private/etc"),
		subpath("/private/var/db/timezone"), subpath("/private/var/db/dyld"),
		subpath("/private/var/select"), literal("/private/var/db/xcode_select_link"),
		fl(`(regex #"^/Applications/Xcode[^/]*\.app(/|$)")`),
		filter{literal("/etc").expr, "symbolic links into /private"},
		literal("/tmp"), literal("/var"),
	)
	w.comment("Metadata (stat, not listing) of the directories on the way to them.")
	w.rule("allow file-read-metadata",
		literal("/private"), literal("/private/var"), literal("/private/var/db"),
		literal("/opt"), literal("/Applications"))
	w.comment("Not the data volume through its alias under /System (/Users lives there):",
		"only its mount point may be looked at.")
	w.rule("deny "+opsReadWrite, subpath(dataVolume), regex(treeRegex(dataVolume)))
	w.rule("allow file-read-metadata", literal("/System/Volumes"), literal(dataVolume))
}

func (w *writer) broadGrants(pl *plan) {
	if len(pl.broadRead) == 0 && len(pl.broadWrite) == 0 {
		return
	}
	w.comment("Grants from trusted config that contain the home directory. They come before the",
		"home directory is closed, so they never open it.")
	if len(pl.broadRead) > 0 {
		w.rule("allow "+opsRead, subpaths(pl.broadRead)...)
	}
	if len(pl.broadWrite) > 0 {
		w.rule("allow "+opsReadWrite, subpaths(pl.broadWrite)...)
	}
}

func (w *writer) closeHome(pl *plan) {
	w.comment("The home directory is closed: nothing under it (~/.ssh, ~/.aws, ~/.config,",
		"~/Library, other projects) may be read or written, under either spelling and in any",
		"letter case, except what the grants below open.")
	w.rule("deny "+opsReadWrite, closed(pl.p.UserHome)...)
}

func (w *writer) grants(pl *plan) {
	if pl.p.Mode == sandbox.WorkspaceWrite {
		w.comment("The workspace: readable and writable (workspace-write).")
		w.rule("allow "+opsReadWrite, subpath(pl.p.Workspace))
	} else {
		w.comment("The workspace: readable, not writable (read-only).")
		w.rule("allow "+opsRead, subpath(pl.p.Workspace))
	}
	w.comment("The session's private temp dir (TMPDIR): readable and writable.")
	w.rule("allow "+opsReadWrite, subpath(pl.p.TempDir))
	if len(pl.read) > 0 {
		if pl.p.Proxy != nil {
			w.comment("Extra read-only paths from trusted config, and the proxied network's trust files.")
		} else {
			w.comment("Extra read-only paths from trusted config.")
		}
		w.rule("allow "+opsRead, subpaths(pl.read)...)
	}
	if len(pl.write) > 0 {
		w.comment("Extra read-write paths from trusted config.")
		w.rule("allow "+opsReadWrite, subpaths(pl.write)...)
	}

	var anc []string
	for _, g := range [][]string{{pl.p.Workspace, pl.p.TempDir}, pl.read, pl.write, pl.broadRead, pl.broadWrite} {
		for _, p := range g {
			anc = append(anc, ancestors(p)...)
		}
	}
	if anc = dedup(anc); len(anc) > 0 {
		w.comment("Metadata (stat, not listing) of the granted paths' parents, so paths resolve",
			"and the working directory can be found.")
		w.rule("allow file-read-metadata", literals(anc)...)
	}

	w.comment("No hard links: a second name for a protected file would escape the rules",
		"below, which match names.")
	w.rule("deny file-link", subpath("/"))
}

func (w *writer) network(pl *plan) {
	w.comment("Unix-domain sockets: only in the session temp dir, for IPC between the sandbox's",
		"own processes. Host daemons (Docker, ssh-agent, gpg-agent, ...) stay unreachable.")
	w.rule("allow network-bind network-outbound", subpath(pl.p.TempDir))
	if x := pl.p.Proxy; x != nil {
		w.comment("Network: proxied. The one IP operation allowed is a TCP connection to the local",
			"gateway's proxy port on loopback; commands reach everything else through it",
			"(HTTPS_PROXY and friends), by its rules. No bind, no accept, no UDP, no DNS",
			"service and no certificate service (trustd fetches on its own: a channel out):",
			"a command that ignores the proxy variables fails to connect.")
		w.rule("allow network-outbound", fl(`(remote tcp `+quote("localhost:"+strconv.Itoa(x.Port))+`)`))
		return
	}
	if !pl.p.AllowNetwork {
		w.comment("Network: denied. No rule allows an IP socket to connect, bind or accept,",
			"loopback included, and no DNS service is reachable.")
		return
	}
	w.comment("Network: allowed over IP, with the system resolver, network configuration and",
		"certificate trust services it needs.")
	w.rule("allow network-outbound", fl(`(remote ip "*:*")`))
	w.rule("allow network-bind network-inbound", fl(`(local ip "*:*")`))
	w.rule("allow system-socket")
	w.rule("allow network-outbound", filter{literal("/private/var/run/mDNSResponder").expr, "the DNS resolver"})
	w.rule("allow "+opsRead, filter{literal("/private/var/run/resolv.conf").expr, "/etc/resolv.conf"})
	w.rule("allow mach-lookup",
		filter{`(global-name "com.apple.dnssd.service")`, "DNS resolution"},
		filter{`(global-name "com.apple.SystemConfiguration.DNSConfiguration")`, "resolver configuration"},
		filter{`(global-name "com.apple.SystemConfiguration.configd")`, "network configuration, proxies"},
		filter{`(global-name "com.apple.trustd")`, "TLS certificate evaluation"},
		filter{`(global-name "com.apple.trustd.agent")`, "TLS certificate evaluation"},
		filter{`(global-name "com.apple.ocspd")`, "certificate revocation"},
	)
}

func (w *writer) protected(pl *plan) {
	ws := pl.p.Workspace
	wsRe := "^" + regexQuote(ws, false) + "/"
	fs := []filter{literal(ws)}
	for _, rel := range pl.protected {
		for _, a := range relAncestors(rel) {
			fs = append(fs, literal(ws+"/"+a), regex(wsRe+regexQuote(a, true)+"$"))
		}
		full := ws + "/" + rel
		fs = append(fs, literal(full), subpath(full), regex(wsRe+regexQuote(rel, true)+"(/|$)"))
	}
	w.comment("Protected paths stay read-only even in workspace-write, whether or not they exist",
		"yet and in any letter case (APFS is usually case-insensitive): .git/hooks, .git/config,",
		".vak and the configured ones. Their parents, and the workspace itself, cannot be",
		"created, removed or renamed, so a protected path cannot be swapped in from elsewhere.")
	w.rule("deny file-write*", fs...)
}

func (w *writer) deny(pl *plan) {
	var fs []filter
	for _, p := range append(append([]string(nil), pl.p.Deny...), alwaysDeny...) {
		fs = append(fs, closed(p)...)
	}
	w.comment("Closed for everything, whatever was granted above: the launcher's deny list (vak's",
		"own config and state) and the machine keychains.")
	w.rule("deny "+opsReadWrite+" network-bind network-outbound", fs...)
	if h := pl.p.AgentHome; h != "" {
		w.comment("The persistent private home (HOME): readable and writable. It lies in vak's",
			"state directory; nothing else of it opens.")
		w.rule("allow "+opsReadWrite, subpath(h))
		w.rule("allow file-read-metadata", literals(ancestors(h))...)
	}
}

// relAncestors returns the proper ancestors of a clean relative path,
// shallowest first ("a/b/c" gives "a", "a/b").
func relAncestors(rel string) []string {
	var out []string
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}

func subpaths(ps []string) []filter {
	fs := make([]filter, len(ps))
	for i, p := range ps {
		fs[i] = subpath(p)
	}
	return fs
}

func literals(ps []string) []filter {
	fs := make([]filter, len(ps))
	for i, p := range ps {
		fs[i] = literal(p)
	}
	return fs
}
