package fsguard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Why the change time is enough. On a local Linux file system every
// change to a directory's set of entries (create, unlink, rename in or
// out, link, mkdir, rmdir, symlink, mknod) sets the directory's ctime to
// the current time, and nothing sets it to anything else: utimensat sets
// the access and modification times only, so a sandboxed command can
// neither keep nor restore a directory's ctime across a change. A
// directory whose device, inode and ctime are what the record says
// therefore has the entries the record lists, with two exceptions that
// the Ledger closes:
//
//   - Time stamps are coarse (a kernel tick, or a second on a file system
//     with small inodes): a change in the same tick as the recorded one
//     leaves the ctime equal. A directory whose ctime was within
//     racyMargin of the moment it was read is recorded as racy and read
//     again by every pass until it is older (git's "racily clean" index
//     entries, the same reasoning).
//   - The clock can be set back, and then a later change could get an
//     earlier time stamp. Each record carries the difference between the
//     wall clock and the boot-time clock at its pass; when that
//     difference has shrunk by more than clockSlack (the wall clock went
//     back), or the machine rebooted, the Ledger forgets everything and
//     walks. Only root can set the clock, and a sandbox has no root.
//
// What the Ledger does not trust: a file system other than the local ones
// (localFS: a network share changes without this kernel setting
// anything), a directory on another device than the workspace's (a mount
// below it), a workspace directory that is another directory than the one
// recorded, a record that fails its checksum or names another workspace,
// a tree over MaxWalkEntries or MaxWalkDepth. Each of these makes it give
// up (every later pass is Tree.Scan) or start over from a walk, never
// guess.
//
// Stats of recorded directories go by path from the workspace (statx with
// AT_SYMLINK_NOFOLLOW), on as many threads as there are CPUs, in no
// particular order: a stat that finds a directory's device, inode and
// ctime as recorded proves that this directory had the recorded entries at
// that moment, whichever path led to it, and any change after it gets a
// new ctime, which the next pass sees. (A symbolic link in the middle of
// such a path, put there by a writer racing the pass, leads either to the
// very same directory or to one that does not match.) What a pass reads,
// it reads in order, parents before children, each directory opened
// beneath the workspace without following any link (openat2), as
// Tree.Scan does.

// racyMargin is how recent a directory's ctime may be, when it is read,
// for the record to be trusted later: a kernel tick and a second of
// time-stamp granularity, with room to spare. (A variable for the tests,
// which wait less: their file systems stamp in nanoseconds.)
var racyMargin = 3 * time.Second

const (
	// clockSlack is how far the wall clock may have gone back (against
	// the boot-time clock) before the Ledger forgets its records. NTP's
	// slewing moves it a little; a step back is what this catches.
	clockSlack = time.Second
)

// Reasons a Ledger's pass starts over from a walk.
var (
	errLedgerClock = errors.New("the clock was set back")
	errLedgerRoot  = errors.New("the workspace directory is another one")
)

// ledgerMagic starts a Ledger's file; the number is its format's version.
const ledgerMagic = "vak-ledger 1\n"

// Ledger: see ledger.go.
type Ledger struct {
	mu   sync.Mutex
	path string // the workspace
	file string // where the record is kept, "" for none

	dirs  map[string]*ldir // by workspace-relative path, "" the workspace
	order []string         // the keys of dirs, sorted: parents first

	rootDev, rootIno uint64
	bootID           string
	clockOff         int64 // the largest wall - boot-time clock difference seen

	dirty bool
	off   error
	stats LedgerStats
	buf   []byte // getdents buffer
}

// ldir is one directory of a Ledger.
type ldir struct {
	dev, ino uint64
	ctime    int64    // nanoseconds; 0: racy, read again
	git      []string // its entries that are .git entries (IsGitName)
	n        int      // how many entries it has
	ents     []byte   // its entries (name, d_ino, type), sorted by name, encoded
}

// OpenLedger returns the Ledger of the canonical workspace ws kept in file
// ("" for none: the Ledger then lives as long as the process). A file that
// is missing, unreadable, damaged or of another workspace, boot or format
// is no error: the first pass walks, and Stats says why.
func OpenLedger(ws, file string) *Ledger {
	l := &Ledger{path: ws, file: file, bootID: readBootID()}
	if file == "" {
		l.stats.Why = "no file"
		return l
	}
	if err := l.load(); err != nil {
		l.reset()
		l.stats.Why = err.Error()
		return l
	}
	l.stats.Loaded = true
	return l
}

// Stats says what the last pass did.
func (l *Ledger) Stats() LedgerStats {
	if l == nil {
		return LedgerStats{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// reset forgets every record.
func (l *Ledger) reset() {
	l.dirs, l.order = map[string]*ldir{}, nil
	l.rootDev, l.rootIno, l.clockOff = 0, 0, 0
}

// Scan returns what t.Scan(setuid) would return now, t a Tree of the
// Ledger's workspace, with one difference where setuid is set: Setuid
// lists the regular files that are new since the Ledger's last pass (a
// name it did not list, or a name for another inode), not every file
// with the bit. It is for a workspace whose writers cannot give an
// existing file the bit by a mode change (sandbox.WorkerLaunch.NoSetIDModes),
// as NewChangeWatch is.
func (l *Ledger) Scan(t *Tree, setuid bool) (Scan, error) {
	if l == nil || t.path != l.path {
		return t.Scan(setuid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.off != nil {
		return t.Scan(setuid)
	}
	sc, err := l.pass(t, setuid)
	if errors.Is(err, errLedgerClock) || errors.Is(err, errLedgerRoot) {
		// Start over: every directory is read, every file is new.
		l.reset()
		sc, err = l.pass(t, setuid)
	}
	if err != nil {
		l.reset()
		l.off = fmt.Errorf("fsguard: ledger of %s: %w", l.path, err)
		l.stats.Off = l.off.Error()
		return t.Scan(setuid)
	}
	return sc, nil
}

// lpass is one pass of a Ledger.
type lpass struct {
	l      *Ledger
	t      *Tree
	setuid bool
	now    int64 // wall clock at the pass's start, nanoseconds
	next   map[string]*ldir
	gone   map[string]bool // recorded directories no longer where recorded
	sc     Scan
	read   int
	n      int // entries
}

func (l *Ledger) pass(t *Tree, setuid bool) (Scan, error) {
	off := clockOffset()
	if len(l.dirs) > 0 && off < l.clockOff-int64(clockSlack) {
		return Scan{}, errLedgerClock
	}
	var root unix.Stat_t
	if err := unix.Fstat(t.fd, &root); err != nil {
		return Scan{}, fail("ledger", t.path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(t.fd, &fs); err != nil {
		return Scan{}, fail("ledger", t.path, err)
	}
	if !localFS(int64(fs.Type)) {
		return Scan{}, fmt.Errorf("file system type %#x can change without this kernel setting a time stamp", fs.Type)
	}
	if len(l.dirs) > 0 && (uint64(root.Dev) != l.rootDev || root.Ino != l.rootIno) {
		return Scan{}, errLedgerRoot
	}
	l.rootDev, l.rootIno = uint64(root.Dev), root.Ino
	p := &lpass{l: l, t: t, setuid: setuid, now: time.Now().UnixNano(), next: make(map[string]*ldir, len(l.dirs)), sc: Scan{Git: map[string]Entry{}}}
	same := l.statAll(t.fd)
	if len(l.order) == 0 {
		if err := p.readDir("", nil); err != nil {
			return Scan{}, err
		}
	}
	for i, rel := range l.order {
		if p.dropped(rel) {
			continue
		}
		if _, done := p.next[rel]; done {
			continue
		}
		old := l.dirs[rel]
		if same[i] {
			p.next[rel] = old
			if err := p.count(old); err != nil {
				return Scan{}, err
			}
			continue
		}
		if err := p.readDir(rel, old); err != nil {
			return Scan{}, err
		}
	}
	if err := p.finish(); err != nil {
		return Scan{}, err
	}
	if p.read > 0 || len(p.next) != len(l.dirs) {
		l.order = make([]string, 0, len(p.next))
		for rel := range p.next {
			l.order = append(l.order, rel)
		}
		slices.Sort(l.order)
		l.dirty = true
	}
	l.dirs = p.next
	l.clockOff = max(l.clockOff, off)
	l.stats.Dirs, l.stats.Read = len(p.next), p.read
	return p.sc, nil
}

// dropped says whether rel or a parent of it is no longer where recorded.
func (p *lpass) dropped(rel string) bool {
	if len(p.gone) == 0 {
		return false
	}
	for i := range len(rel) {
		if rel[i] == '/' && p.gone[rel[:i]] {
			return true
		}
	}
	return p.gone[rel]
}

// statAll stats every recorded directory from root (the workspace's
// descriptor) and says, in the order of l.order, which are as recorded
// (device, inode, ctime; never a racy one). A large record is split among
// a thread per CPU: the stats are independent of each other (see the top
// of this file).
func (l *Ledger) statAll(root int) []bool {
	same := make([]bool, len(l.order))
	workers := min(runtime.GOMAXPROCS(0), 4, 1+len(l.order)/1024)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(l.order)/workers, (w+1)*len(l.order)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				same[i] = l.unchanged(root, l.order[i])
			}
		}()
	}
	wg.Wait()
	return same
}

// unchanged says whether the directory rel (below root) is what its
// record says.
func (l *Ledger) unchanged(root int, rel string) bool {
	d := l.dirs[rel]
	if d.ctime == 0 {
		return false
	}
	var stx unix.Statx_t
	name, flags := rel, unix.AT_SYMLINK_NOFOLLOW
	if rel == "" {
		flags = unix.AT_EMPTY_PATH
	}
	if unix.Statx(root, name, flags, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_CTIME, &stx) != nil {
		return false
	}
	return stx.Mode&unix.S_IFMT == unix.S_IFDIR && unix.Mkdev(stx.Dev_major, stx.Dev_minor) == d.dev &&
		stx.Ino == d.ino && stx.Ctime.Sec*1e9+int64(stx.Ctime.Nsec) == d.ctime
}

// count adds the entries of d to the pass and checks the bound.
func (p *lpass) count(d *ldir) error {
	if p.n += d.n; p.n > MaxWalkEntries {
		return fmt.Errorf("more than %d entries", MaxWalkEntries)
	}
	return nil
}

// readDir reads the directory rel and records it, comparing its entries
// with old's where old is the same directory (see compare).
func (p *lpass) readDir(rel string, old *ldir) error {
	depth, name := 0, "."
	if rel != "" {
		depth, name = strings.Count(rel, "/")+1, rel
	}
	if depth >= MaxWalkDepth {
		return fmt.Errorf("more than %d levels", MaxWalkDepth)
	}
	fd, err := openat2(p.t.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, strictResolve)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		// Gone or replaced since its parent was read or checked: the
		// parent's ctime has changed since, which the next pass sees.
		p.drop(rel)
		return nil
	}
	if err != nil {
		return fail("ledger", filepath.Join(p.t.path, rel), err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("ledger", filepath.Join(p.t.path, rel), err)
	}
	if uint64(st.Dev) != p.l.rootDev {
		return fmt.Errorf("directory %q is on another file system than the workspace", rel)
	}
	d := &ldir{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec}
	if d.ctime == 0 || d.ctime >= p.now-int64(racyMargin) {
		d.ctime = 0
	}
	w := walker{buf: p.l.buf}
	ents, complete := w.readDir(fd)
	p.l.buf = w.buf
	if !complete {
		return fmt.Errorf("directory %q: could not read all of it", rel)
	}
	for i := range ents {
		e := &ents[i]
		if e.typ == unix.DT_UNKNOWN {
			var est unix.Stat_t
			if unix.Fstatat(fd, e.name, &est, unix.AT_SYMLINK_NOFOLLOW) == nil {
				e.typ = dtype(est.Mode)
			} // else gone since: the directory's ctime has changed
		}
	}
	p.read++
	d.n, d.ents = len(ents), encodeEnts(ents)
	p.next[rel] = d
	if err := p.count(d); err != nil {
		return err
	}
	if rel == "" {
		p.sc.listRoot(ents, true)
	}
	if old != nil && (old.ino != d.ino || old.dev != d.dev) {
		p.drop(rel) // what was recorded below it was another directory's
		old = nil
	}
	return p.compare(fd, rel, d, ents, old)
}

// compare goes through the entries ents just read of the directory rel
// (fd, recorded as d) against old, its record (nil: none, or another
// directory's): .git entries are noted in d, subdirectories that are new
// or another inode are read too (and what was recorded below them
// dropped), vanished ones are dropped, and with setuid new regular files
// are looked at for the setuid and setgid bits.
func (p *lpass) compare(fd int, rel string, d *ldir, ents []dirent, old *ldir) error {
	var before map[string]dirent
	if old != nil {
		before = make(map[string]dirent, old.n)
		for _, e := range decodeEnts(old.ents) {
			before[e.name] = e
		}
	}
	for _, e := range ents {
		b, known := before[e.name]
		same := known && b.ino == e.ino && b.typ == e.typ
		child := joinRel(rel, e.name)
		switch {
		case IsGitName(e.name):
			d.git = append(d.git, e.name)
		case e.typ == unix.DT_DIR:
			if same && p.l.dirs[child] != nil {
				continue // checked in its turn (parents sort first)
			}
			p.drop(child)
			if err := p.readDir(child, nil); err != nil {
				return err
			}
		case e.typ == unix.DT_REG && p.setuid && !same && setIDFile(fd, e.name):
			p.sc.Setuid = append(p.sc.Setuid, child)
		}
	}
	for name, b := range before {
		if b.typ != unix.DT_DIR {
			continue
		}
		i, found := slices.BinarySearchFunc(ents, name, func(e dirent, n string) int { return strings.Compare(e.name, n) })
		if !found || ents[i].typ != unix.DT_DIR {
			p.drop(joinRel(rel, name)) // gone, or no longer a directory
		}
	}
	return nil
}

// parentRel is the workspace-relative path of rel's parent ("" the
// workspace).
func parentRel(rel string) string {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ""
	}
	return rel[:i]
}

// joinRel is the workspace-relative path of name in the directory rel.
func joinRel(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// drop marks what was recorded at and below rel as no longer there; a
// directory read there in this pass is kept.
func (p *lpass) drop(rel string) {
	if p.gone == nil {
		p.gone = map[string]bool{}
	}
	p.gone[rel] = true
}

// finish records the pass's .git entries (a stat each, beneath the
// workspace without following links) and sorts its setuid files.
func (p *lpass) finish() error {
	for rel, d := range p.next {
		for _, name := range d.git {
			r := joinRel(rel, name)
			e, err := p.t.Stat(r)
			if err != nil {
				return err
			}
			if e.Kind == Absent || e.Kind == ViaLink {
				continue // gone, or a parent replaced: the next pass sees it
			}
			p.sc.Git[r] = e
		}
	}
	slices.Sort(p.sc.Setuid)
	if d := p.next[""]; d != nil && !p.sc.rootListed {
		p.sc.listRoot(decodeEnts(d.ents), true)
	}
	return nil
}

// encodeEnts encodes entries: per entry its name's length, the name, its
// d_ino and its type.
func encodeEnts(ents []dirent) []byte {
	size := 0
	for _, e := range ents {
		size += len(e.name) + 12
	}
	b := make([]byte, 0, size)
	for _, e := range ents {
		b = binary.AppendUvarint(b, uint64(len(e.name)))
		b = append(b, e.name...)
		b = binary.AppendUvarint(b, e.ino)
		b = append(b, e.typ)
	}
	return b
}

// decodeEnts decodes what encodeEnts encoded, in its order. It stops at
// anything that is not an entry of a directory (the record is checked
// only by its checksum when it is loaded): a listing cut short makes more
// entries look new, which costs a stat or a read, never a miss.
func decodeEnts(b []byte) []dirent {
	var ents []dirent
	for len(b) > 0 {
		var e dirent
		var ok bool
		if e.name, b, ok = readString(b); !ok || e.name == "" || e.name == "." || e.name == ".." || strings.ContainsAny(e.name, "/\x00") {
			return ents
		}
		v, k := binary.Uvarint(b)
		if k <= 0 || k >= len(b) {
			return ents
		}
		e.ino, e.typ, b = v, b[k], b[k+1:]
		ents = append(ents, e)
	}
	return ents
}

// Save writes the Ledger to its file if a pass changed it: a new file
// (0600) in the same directory, renamed over the old one, so that a
// reader sees one record or the other.
func (l *Ledger) Save() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == "" || !l.dirty || l.off != nil || len(l.dirs) == 0 {
		return nil
	}
	b := l.encode()
	dir := filepath.Dir(l.file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("fsguard: ledger: %w", err)
	}
	if _, err := os.Lstat(l.file); errors.Is(err, os.ErrNotExist) {
		// A workspace's first record: forget those of workspaces not
		// run in for a while (most are temporary directories long gone).
		pruneLedgers(dir, time.Now().Add(-ledgerMaxAge))
	}
	f, err := os.CreateTemp(dir, ".ledger-*")
	if err != nil {
		return fmt.Errorf("fsguard: ledger: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), l.file)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("fsguard: ledger: %w", err)
	}
	l.dirty = false
	return nil
}

// ledgerMaxAge is how long a record not written to stays.
const ledgerMaxAge = 30 * 24 * time.Hour

// pruneLedgers removes the records in dir last written before cutoff.
func pruneLedgers(dir string, cutoff time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.ModTime().Before(cutoff) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (l *Ledger) encode() []byte {
	b := []byte(ledgerMagic)
	b = appendString(b, l.path)
	b = appendString(b, l.bootID)
	b = binary.AppendUvarint(b, l.rootDev)
	b = binary.AppendUvarint(b, l.rootIno)
	b = binary.AppendVarint(b, l.clockOff)
	b = binary.AppendUvarint(b, uint64(len(l.order)))
	for _, rel := range l.order {
		d := l.dirs[rel]
		b = appendString(b, rel)
		b = binary.AppendUvarint(b, d.dev)
		b = binary.AppendUvarint(b, d.ino)
		b = binary.AppendVarint(b, d.ctime)
		b = binary.AppendUvarint(b, uint64(d.n))
		b = binary.AppendUvarint(b, uint64(len(d.git)))
		for _, g := range d.git {
			b = appendString(b, g)
		}
		b = binary.AppendUvarint(b, uint64(len(d.ents)))
		b = append(b, d.ents...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// errLedgerFile is a record that cannot be used.
var errLedgerFile = errors.New("damaged")

func (l *Ledger) load() error {
	b, err := os.ReadFile(l.file)
	if err != nil {
		return err
	}
	if len(b) < len(ledgerMagic)+4 || !bytes.HasPrefix(b, []byte(ledgerMagic)) {
		return errLedgerFile
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return errLedgerFile
	}
	r := &lreader{b: body[len(ledgerMagic):]}
	if r.str() != l.path {
		return errors.New("another workspace's")
	}
	if r.str() != l.bootID || l.bootID == "" {
		return errors.New("from before the last boot")
	}
	l.reset()
	l.rootDev, l.rootIno, l.clockOff = r.uint(), r.uint(), r.int()
	n := r.uint()
	if r.bad || n > MaxWalkEntries {
		return errLedgerFile
	}
	prev := ""
	for i := range int(n) {
		rel := r.str()
		d := &ldir{dev: r.uint(), ino: r.uint(), ctime: r.int(), n: int(r.uint())}
		ng := r.uint()
		if r.bad || ng > uint64(d.n) || (i > 0 && rel <= prev) || (i == 0) != (rel == "") {
			return errLedgerFile
		}
		for range ng {
			d.git = append(d.git, r.str())
		}
		d.ents = r.bytes(int(r.uint()))
		if r.bad || (rel != "" && (!filepath.IsLocal(rel) || path.Clean(rel) != rel || l.dirs[parentRel(rel)] == nil)) {
			return errLedgerFile
		}
		l.dirs[rel], prev = d, rel
		l.order = append(l.order, rel)
	}
	if len(r.b) != 0 {
		return errLedgerFile
	}
	return nil
}

// lreader decodes a Ledger's file; bad says it ran out or met nonsense.
type lreader struct {
	b   []byte
	bad bool
}

func (r *lreader) uint() uint64 {
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[k:]
	return v
}

// int decodes what binary.AppendVarint encoded (zigzag over a uvarint).
func (r *lreader) int() int64 {
	u := r.uint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (r *lreader) bytes(n int) []byte {
	if n < 0 || n > len(r.b) {
		r.bad, r.b = true, nil
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *lreader) str() string { return string(r.bytes(int(r.uint()))) }

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func readString(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// clockOffset and readBootID are variables for the tests, which cannot set
// the clock or reboot.
var clockOffset, readBootID = wallMinusBoot, bootID

// wallMinusBoot is the wall clock minus the boot-time clock, in
// nanoseconds: constant while nobody sets the clock.
func wallMinusBoot() int64 {
	var wall, boot unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &wall)
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
	return wall.Nano() - boot.Nano()
}

// bootID names this boot of the machine ("" if unknown: no record is then
// trusted).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
