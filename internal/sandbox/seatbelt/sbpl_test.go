package seatbelt

// A reader for the SBPL subset Profile emits, and a model of how Seatbelt
// decides an operation, so that tests can check a profile's meaning on any
// platform. The reader is strict: anything Profile should never produce (an
// unknown escape, a control character in a string, an unknown symbol) is an
// error rather than something to be tolerated.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// sexpr is one parsed SBPL expression.
type sexpr struct {
	list   []*sexpr // for lists
	isList bool
	sym    string // for symbols
	str    string // decoded, for strings
	isStr  bool
	raw    bool // a #"..." string
}

func (e *sexpr) String() string {
	switch {
	case e.isList:
		parts := make([]string, len(e.list))
		for i, c := range e.list {
			parts[i] = c.String()
		}
		return "(" + strings.Join(parts, " ") + ")"
	case e.isStr:
		return fmt.Sprintf("%q", e.str)
	}
	return e.sym
}

// head returns the symbol a list starts with, or "".
func (e *sexpr) head() string {
	if !e.isList || len(e.list) == 0 || e.list[0].isList || e.list[0].isStr {
		return ""
	}
	return e.list[0].sym
}

// vocabulary is every symbol Profile may emit.
var vocabulary = map[string]bool{}

func init() {
	for _, s := range strings.Fields(`1 version allow deny default
		process-fork process-exec signal process-info* target same-sandbox
		sysctl-read sysctl-write sysctl-name mach-host* mach-lookup global-name
		ipc-posix-shm-read* ipc-posix-name ipc-posix-sem pseudo-tty
		file-read* file-write* file-write-data file-read-metadata file-map-executable
		file-ioctl file-link literal subpath regex require-all extension
		network-bind network-outbound network-inbound remote local ip tcp system-socket`) {
		vocabulary[s] = true
	}
}

type token struct {
	kind byte // '(' ')' 's' (symbol) '"' (string)
	val  string
	raw  bool
}

func lex(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == ';':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '(' || c == ')':
			toks = append(toks, token{kind: c})
			i++
		case c == '"':
			var b strings.Builder
			i++
			for {
				if i >= len(src) {
					return nil, errors.New("unterminated string")
				}
				c := src[i]
				if c == '"' {
					i++
					break
				}
				if c < 0x20 || c == 0x7f {
					return nil, fmt.Errorf("control byte %#x in string at %d", c, i)
				}
				if c == '\\' {
					if i+1 >= len(src) || (src[i+1] != '\\' && src[i+1] != '"') {
						return nil, fmt.Errorf("unexpected escape at %d", i)
					}
					i++
					c = src[i]
				}
				b.WriteByte(c)
				i++
			}
			toks = append(toks, token{kind: '"', val: b.String()})
		case c == '#':
			if i+1 >= len(src) || src[i+1] != '"' {
				return nil, fmt.Errorf("unexpected # at %d", i)
			}
			end := strings.IndexByte(src[i+2:], '"')
			if end < 0 {
				return nil, errors.New("unterminated raw string")
			}
			toks = append(toks, token{kind: '"', val: src[i+2 : i+2+end], raw: true})
			i += end + 3
		default:
			j := i
			for j < len(src) && !strings.ContainsRune(" \t\r\n();\"", rune(src[j])) {
				j++
			}
			sym := src[i:j]
			if !vocabulary[sym] {
				return nil, fmt.Errorf("unknown symbol %q at %d", sym, i)
			}
			toks = append(toks, token{kind: 's', val: sym})
			i = j
		}
	}
	return toks, nil
}

// parseSBPL reads a whole profile into its top-level forms, which must all be
// lists headed by version, allow or deny.
func parseSBPL(src string) ([]*sexpr, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	var forms []*sexpr
	stack := []*sexpr{{isList: true}}
	for _, t := range toks {
		top := stack[len(stack)-1]
		switch t.kind {
		case '(':
			e := &sexpr{isList: true}
			top.list = append(top.list, e)
			stack = append(stack, e)
		case ')':
			if len(stack) == 1 {
				return nil, errors.New("unbalanced )")
			}
			stack = stack[:len(stack)-1]
		case 's':
			top.list = append(top.list, &sexpr{sym: t.val})
		case '"':
			top.list = append(top.list, &sexpr{str: t.val, isStr: true, raw: t.raw})
		}
	}
	if len(stack) != 1 {
		return nil, errors.New("unbalanced (")
	}
	forms = stack[0].list
	for _, f := range forms {
		switch f.head() {
		case "version", "allow", "deny":
		default:
			return nil, fmt.Errorf("unexpected top-level form %s", f)
		}
	}
	return forms, nil
}

// A rule of the model: an action, its operations, and its filters (none
// means the rule is unfiltered).
type rule struct {
	allow   bool
	ops     []string
	filters []*sexpr
}

func rulesOf(forms []*sexpr) ([]rule, error) {
	var rs []rule
	for _, f := range forms {
		if f.head() == "version" {
			continue
		}
		r := rule{allow: f.head() == "allow"}
		for _, e := range f.list[1:] {
			switch {
			case e.isList:
				r.filters = append(r.filters, e)
			case e.isStr:
				return nil, fmt.Errorf("string outside a filter in %s", f)
			default:
				if len(r.filters) > 0 {
					return nil, fmt.Errorf("operation after a filter in %s", f)
				}
				r.ops = append(r.ops, e.sym)
			}
		}
		if len(r.ops) == 0 {
			return nil, fmt.Errorf("no operation in %s", f)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// query is one operation the model decides.
type query struct {
	op   string // e.g. file-read-data, file-write-create, network-outbound
	path string // for file operations and unix-domain sockets
	name string // sysctl or Mach service name
	ip   bool   // an IP (not unix-domain) socket operation
	addr string // its other end, "HOST:PORT" (HOST "localhost" for loopback); "" matches only "*:*"
	udp  bool   // a UDP (not TCP) IP socket
	ext  string // a sandbox extension the path carries
}

// opMatches reports whether a rule's operation covers q's. Pessimistically,
// file-link is also covered by file-write* and mapping a file executable by
// file-read*, so the model never under-grants relative to Seatbelt.
func opMatches(ruleOp, op string) bool {
	switch {
	case ruleOp == op:
		return true
	case op == "file-link" && ruleOp == "file-write*",
		op == "file-map-executable" && ruleOp == "file-read*":
		return true
	case strings.HasSuffix(ruleOp, "*"):
		return strings.HasPrefix(op, strings.TrimSuffix(ruleOp, "*"))
	}
	return false
}

var regexCache sync.Map

func compileRegex(re string) *regexp.Regexp {
	if v, ok := regexCache.Load(re); ok {
		return v.(*regexp.Regexp)
	}
	c := regexp.MustCompile(re)
	regexCache.Store(re, c)
	return c
}

func filterMatches(f *sexpr, q query) bool {
	arg := func(i int) string {
		if len(f.list) > i && f.list[i].isStr {
			return f.list[i].str
		}
		return ""
	}
	switch f.head() {
	case "literal":
		return q.path != "" && q.path == arg(1)
	case "subpath":
		p := arg(1)
		return q.path != "" && (q.path == p || p == "/" || strings.HasPrefix(q.path, p+"/"))
	case "regex":
		return q.path != "" && compileRegex(arg(1)).MatchString(q.path)
	case "require-all":
		for _, c := range f.list[1:] {
			if !filterMatches(c, q) {
				return false
			}
		}
		return true
	case "extension":
		return q.ext != "" && q.ext == arg(1)
	case "sysctl-name", "global-name", "ipc-posix-name":
		return q.name != "" && q.name == arg(1)
	case "remote", "local":
		// (remote ip|tcp "HOST:PORT"): "*" matches any host or port.
		if !q.ip || len(f.list) != 3 || f.list[1].isStr || f.list[1].isList {
			return false
		}
		if f.list[1].sym == "tcp" && q.udp {
			return false
		}
		wantHost, wantPort, _ := strings.Cut(arg(2), ":")
		host, port, _ := strings.Cut(q.addr, ":")
		return (wantHost == "*" || (host == wantHost && host != "")) && (wantPort == "*" || (port == wantPort && port != ""))
	case "target":
		return false // the model asks about no other process
	}
	panic("model: unknown filter " + f.String())
}

// decide is Seatbelt's decision as the model understands it: among the
// rules whose operation covers q's, the last filtered rule with a matching
// filter wins; failing that, the last unfiltered rule; failing that, the
// default.
func decide(rs []rule, q query) bool {
	def, lastPlain, lastFiltered := false, -1, -1
	for i, r := range rs {
		if len(r.ops) == 1 && r.ops[0] == "default" {
			def = r.allow
			continue
		}
		if !slices.ContainsFunc(r.ops, func(o string) bool { return opMatches(o, q.op) }) {
			continue
		}
		if len(r.filters) == 0 {
			lastPlain = i
			continue
		}
		for _, f := range r.filters {
			if filterMatches(f, q) {
				lastFiltered = i
				break
			}
		}
	}
	switch {
	case lastFiltered >= 0:
		return rs[lastFiltered].allow
	case lastPlain >= 0:
		return rs[lastPlain].allow
	}
	return def
}
