// Package receipts keeps the gateway's tamper-evident decision log: an
// append-only JSON Lines file with one record per policy decision, each
// carrying the SHA-256 of the previous record's line, so that any edit,
// deletion or reordering breaks the chain and Verify reports where.
//
// A sidecar file (the log path + ".head") holds the sequence number and hash
// of the last record written; Verify compares it too, which catches
// truncation of the tail. A log opened with OpenSigned also gets a
// signature file (the log path + ".sig"): after batches of records, at
// most every SignInterval, the log's timer goroutine (never an Append)
// appends an Ed25519 signature over the last record's hash (a checkpoint),
// and the head is signed too. VerifyFileSigned checks every
// checkpoint against the public key and fails on records no checkpoint
// covers, so records appended or edited by someone without the key are
// reported. Truncating the log and its signature file back to an earlier
// checkpoint stays consistent: compare the head with a copy kept elsewhere
// (`vak gateway status` prints it) when that matters.
//
// Records never contain secret values or placeholder mappings; callers are
// responsible for passing scrubbed paths and reasons.
package receipts

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// ZeroHash is the "prev" of the first record of a log.
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// HeadSuffix is appended to the log path to name the head sidecar file.
const HeadSuffix = ".head"

// Decisions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Record is one decision. Field order is the on-disk order.
type Record struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Session  string    `json:"session,omitempty"`
	Client   string    `json:"client,omitempty"`
	Protocol string    `json:"protocol"`
	Method   string    `json:"method,omitempty"`
	Host     string    `json:"host,omitempty"`
	Port     uint16    `json:"port,omitempty"`
	Path     string    `json:"path,omitempty"`
	// Rule is the index of the deciding rule, -1 when none matched.
	Rule     int    `json:"rule"`
	RuleName string `json:"rule_name,omitempty"`
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	Status   int    `json:"status,omitempty"`
	// BytesOut is what the sandbox sent upstream, BytesIn what it received.
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
	// Secrets names the secrets substituted into the request (names only).
	Secrets []string `json:"secrets,omitempty"`
	Prev    string   `json:"prev"`
}

// Scrub returns r with every free-text field passed through f (the
// gateway's secret scrubber), so that no field can carry a secret.
func (r Record) Scrub(f func(string) string) Record {
	for _, p := range []*string{&r.Session, &r.Client, &r.Protocol, &r.Method, &r.Host, &r.Path, &r.RuleName, &r.Reason} {
		*p = f(*p)
	}
	r.Secrets = slices.Clone(r.Secrets)
	for i := range r.Secrets {
		r.Secrets[i] = f(r.Secrets[i])
	}
	return r
}

// Head identifies the last record of a log.
type Head struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Records is the number of records (0 for an empty log, where Seq and
	// Hash are meaningless and Hash is ZeroHash).
	Records uint64 `json:"records"`
	// Key and Sig sign the head like a Checkpoint (signed logs only).
	Key string `json:"key,omitempty"`
	Sig string `json:"sig,omitempty"`
}

// Errors.
var (
	// ErrTampered means the chain is broken: a record was edited, removed,
	// inserted or reordered, or the tail was truncated.
	ErrTampered = errors.New("receipts: log does not verify")
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("receipts: log closed")
)

func hashLine(line []byte) string { return hexSum(sha256.Sum256(line)) }

// Log appends records to a file. Append is safe for concurrent use. There
// is no writer goroutine: the appender that finds nobody writing writes
// (combining): it takes every queued record, computes the chain and writes
// them in one write, and keeps going while others queued more meanwhile;
// an appender that finds a write in progress queues its record and
// returns, and the writer takes it with the next batch. So records
// arriving one by one are written by their own request's goroutine (no
// hand-off to another thread, which costs a thread wake-up per record on a
// small machine), and records arriving together are written in batches.
//
// Appenders never sign and never rewrite the head file: checkpoints (an
// Ed25519 signature and a write to the signature file) and head rewrites
// are the upkeep, done by the log's timers on their own goroutine, at most
// every SignInterval and HeadInterval. Upkeep and record writes run side by
// side (they write different files): an Append that arrives while a
// checkpoint is being signed writes its record at once, and the next
// checkpoint covers it.
type Log struct {
	path string
	f    *os.File
	// key signs checkpoints into sigf (nil: unsigned log).
	key  ed25519.PrivateKey
	sigf *os.File

	mu      sync.Mutex
	head    Head
	err     error // sticky write error
	closed  bool
	flushed *sync.Cond
	// queue holds appended records no writer has taken yet; spare is the
	// other buffer (queue and the batch being written alternate).
	queue []Record
	spare []Record
	// pending counts appended records not yet written (queued or in the
	// batch being written).
	pending int
	// writing is set while one goroutine (an Append, the goroutine an
	// Append handed its backlog to, or Close) writes records; buf is used
	// only by it.
	writing bool
	buf     bytes.Buffer
	// upkeep is set while a timer's goroutine (or Close) signs a checkpoint
	// or rewrites the head; lastSign and lastHead are used only by it.
	upkeep bool
	// unsigned is set while written records wait for their checkpoint
	// (at most SignInterval, plus the time to sign).
	unsigned bool
	// signArmed and headArmed are set while signTimer and headTimer run.
	signArmed, headArmed bool
	signTimer, headTimer *time.Timer
	// lastSign is when the last checkpoint was started.
	lastSign time.Time
	// dirty is set when the head sidecar is behind; lastHead is when it
	// was last written.
	dirty    bool
	lastHead time.Time
	// Now is the clock (tests); nil means time.Now.
	now func() time.Time
	// testHookSign, if set, runs on the upkeep goroutine before each
	// checkpoint is signed (tests hold a checkpoint in progress with it).
	testHookSign func()
}

// queueLen bounds the records waiting for the writer; Append blocks beyond
// it rather than dropping a record.
const queueLen = 4096

// Open opens (or creates, mode 0600) the log at path and resumes its chain.
// It refuses a log whose last line is incomplete or does not parse, so that
// a damaged log is looked at (with Verify) before more is written to it.
func Open(path string) (*Log, error) { return open(path, nil) }

// OpenSigned is Open for a signed log: after batches of records (at most
// every SignInterval) a checkpoint signed with key is appended to path +
// SigSuffix by the log's timer, and the head is signed. Continuing an unsigned log is allowed: the first checkpoint
// covers every earlier record through the hash chain.
func OpenSigned(path string, key ed25519.PrivateKey) (*Log, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("receipts: OpenSigned needs an Ed25519 private key")
	}
	return open(path, key)
}

func open(path string, key ed25519.PrivateKey) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	head, err := lastHead(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("receipts: %s: %w (run `vak receipts verify %s` and move the file aside)", path, err, path)
	}
	var sigf *os.File
	if key != nil {
		if sigf, err = os.OpenFile(path+SigSuffix, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("receipts: %w", err)
		}
	}
	l := &Log{
		path:     path,
		f:        f,
		key:      key,
		sigf:     sigf,
		head:     head,
		now:      time.Now,
		lastHead: time.Now(),
	}
	l.flushed = sync.NewCond(&l.mu)
	if err := l.writeHead(); err != nil {
		f.Close()
		if sigf != nil {
			sigf.Close()
		}
		return nil, err
	}
	l.signTimer = time.AfterFunc(time.Hour, func() { l.timerFired(&l.signArmed) })
	l.signTimer.Stop()
	l.headTimer = time.AfterFunc(time.Hour, func() { l.timerFired(&l.headArmed) })
	l.headTimer.Stop()
	return l, nil
}

// lastHead reads the final line of f to resume the chain.
func lastHead(f *os.File) (Head, error) {
	fi, err := f.Stat()
	if err != nil {
		return Head{}, err
	}
	size := fi.Size()
	if size == 0 {
		return Head{Hash: ZeroHash}, nil
	}
	// Records are small; read a tail window large enough for several.
	const window = 1 << 20
	off := max(0, size-window)
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return Head{}, err
	}
	if buf[len(buf)-1] != '\n' {
		return Head{}, errors.New("log ends with an incomplete record")
	}
	body := buf[:len(buf)-1]
	i := bytes.LastIndexByte(body, '\n')
	if i < 0 && off > 0 {
		return Head{}, errors.New("last record is larger than 1 MiB")
	}
	line := body[i+1:]
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return Head{}, fmt.Errorf("last record does not parse: %w", err)
	}
	// The record count is only known exactly by a full scan; resume with the
	// sequence number (records are numbered from 0).
	return Head{Seq: r.Seq, Hash: hashLine(line), Records: r.Seq + 1}, nil
}

// Path is the log file path.
func (l *Log) Path() string { return l.path }

// Append adds r to the log. It fills in Seq, Prev and (if zero) Time. When
// no other Append is writing, it writes r (and whatever others queued
// meanwhile) before it returns; otherwise it queues r for the one that is.
// It never signs a checkpoint or rewrites the head file (the log's timers
// do, see Log). It returns the sticky error of an earlier failed write, in
// which case the gateway must stop allowing traffic.
func (l *Log) Append(r Record) error {
	if r.Time.IsZero() {
		r.Time = l.now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.closed {
			return ErrClosed
		}
		if l.err != nil {
			return l.err
		}
		if len(l.queue) < queueLen {
			break
		}
		l.flushed.Wait()
	}
	l.queue = append(l.queue, r)
	l.pending++
	if l.writing {
		return nil
	}
	l.writing = true
	l.runLocked(appendRounds)
	return nil
}

// appendRounds bounds the batches an Append writes for others: under a
// steady stream of records the rest is handed to a goroutine, so no
// request waits on the log for long.
const appendRounds = 2

// runLocked is the writer: called with l.mu held and l.writing set, it
// writes the queued records in batches until none is left, then clears
// l.writing. It releases l.mu around file writes. After rounds batches (0:
// no limit) it hands what is left to a new goroutine, which keeps
// l.writing.
func (l *Log) runLocked(rounds int) {
	for n := 1; len(l.queue) > 0; n++ {
		if rounds > 0 && n > rounds {
			go func() {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.runLocked(0)
			}()
			return
		}
		l.writeQueuedLocked()
	}
	l.writing = false
	l.flushed.Broadcast()
}

// writeQueuedLocked writes the queued records as one batch (one write) and
// arms the upkeep timers for the checkpoint and head that now are due.
func (l *Log) writeQueuedLocked() {
	if len(l.queue) == 0 {
		return
	}
	batch := l.queue
	l.queue = l.spare[:0]
	head, failed := l.head, l.err != nil
	l.mu.Unlock()
	var werr error
	if !failed {
		l.buf.Reset()
		for i := range batch {
			head = l.encode(&batch[i], head)
		}
		_, werr = l.f.Write(l.buf.Bytes())
	}
	clear(batch)
	l.mu.Lock()
	l.spare = batch[:0]
	l.pending -= len(batch)
	switch {
	case failed:
		// After a failed write nothing more is written: the chain on
		// disk would not continue where the in-memory head says.
	case werr != nil:
		if l.err == nil {
			l.err = fmt.Errorf("receipts: write %s: %w", l.path, werr)
		}
	default:
		l.head = head
		l.dirty = true
		if l.key != nil {
			l.unsigned = true
		}
		l.scheduleLocked()
	}
	l.flushed.Broadcast()
}

// scheduleLocked arms the checkpoint and head timers for upkeep that is
// pending and not armed yet: a checkpoint SignInterval after the last one
// (at once when that is past), the head HeadInterval after its last
// rewrite. While the upkeep goroutine runs it is left to it: it looks
// again when it is done.
func (l *Log) scheduleLocked() {
	if l.upkeep || l.closed {
		return
	}
	signDue := l.unsigned && !l.signArmed && l.err == nil
	headDue := l.dirty && !l.headArmed
	if !signDue && !headDue {
		return
	}
	now := time.Now()
	if signDue {
		l.signArmed = true
		l.signTimer.Reset(max(0, SignInterval-now.Sub(l.lastSign)))
	}
	if headDue {
		l.headArmed = true
		l.headTimer.Reset(max(0, HeadInterval-now.Sub(l.lastHead)))
	}
}

// timerFired runs on a timer's goroutine when the checkpoint or the head
// timer is up: it does the upkeep that is due (both, when both are), or
// leaves it to the goroutine doing upkeep at the time.
func (l *Log) timerFired(armed *bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*armed = false
	if l.closed || l.upkeep {
		return
	}
	l.upkeep = true
	for {
		now := time.Now()
		switch {
		case l.unsigned && l.err == nil && now.Sub(l.lastSign) >= SignInterval:
			l.signLocked()
		case l.dirty && now.Sub(l.lastHead) >= HeadInterval:
			l.flushHeadLocked()
		default:
			l.upkeep = false
			l.scheduleLocked()
			l.flushed.Broadcast()
			return
		}
	}
}

// encode appends r's line to l.buf, chained to head, and returns the new
// head.
func (l *Log) encode(r *Record, head Head) Head {
	if head.Records > 0 {
		r.Seq = head.Seq + 1
	} else {
		r.Seq = 0
	}
	r.Prev = head.Hash
	line, err := marshalRecord(l.buf.AvailableBuffer(), r)
	if err != nil {
		// Only a time json.Marshal refuses (a year beyond 9999); keep the
		// chain intact anyway.
		line = []byte(`{"seq":` + fmt.Sprint(r.Seq) + `,"protocol":"internal","rule":-1,"decision":"deny","reason":"unencodable record","bytes_out":0,"bytes_in":0,"prev":"` + r.Prev + `"}`)
	}
	l.buf.Write(line)
	l.buf.WriteByte('\n')
	return Head{Seq: r.Seq, Hash: hashLine(line), Records: head.Records + 1}
}

// signLocked writes a checkpoint for the last written record (it
// authenticates everything before it through the chain). It releases l.mu
// while it signs and writes, so appends go on meanwhile; records written
// in between stay unsigned for the next checkpoint.
func (l *Log) signLocked() {
	if !l.unsigned || l.err != nil {
		return
	}
	l.lastSign = time.Now()
	h := l.head
	l.mu.Unlock()
	if l.testHookSign != nil {
		l.testHookSign()
	}
	cp := Checkpoint{Seq: h.Seq, Records: h.Records, Hash: h.Hash}
	cp.Key, cp.Sig = sign(l.key, cp.Seq, cp.Records, cp.Hash)
	line, _ := json.Marshal(cp)
	_, err := l.sigf.Write(append(line, '\n'))
	l.mu.Lock()
	if err != nil && l.err == nil {
		l.err = fmt.Errorf("receipts: write %s: signature file: %w", l.path, err)
	}
	l.unsigned = l.head.Records != h.Records
	l.flushed.Broadcast()
}

// flushHeadLocked rewrites the head sidecar.
func (l *Log) flushHeadLocked() {
	l.dirty = false
	l.lastHead = time.Now()
	l.mu.Unlock()
	err := l.writeHead()
	l.mu.Lock()
	if err != nil && l.err == nil {
		l.err = err
	}
}

// Err is the sticky write error, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Head returns the head as of the last completed write.
func (l *Log) Head() Head {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head
}

// Sync waits until every record appended before the call is written and
// covered by a checkpoint (signed logs).
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for (l.pending > 0 || l.unsigned) && l.err == nil {
		l.flushed.Wait()
	}
	return l.err
}

// Close writes what is queued, signs it, rewrites the head and closes the
// files.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for l.writing || l.upkeep {
		l.flushed.Wait()
	}
	l.writing, l.upkeep = true, true
	for len(l.queue) > 0 {
		l.writeQueuedLocked()
	}
	l.signTimer.Stop()
	l.headTimer.Stop()
	l.signArmed, l.headArmed = false, false
	if l.key != nil {
		l.signLocked()
	}
	if l.dirty {
		l.flushHeadLocked()
	}
	l.writing, l.upkeep = false, false
	l.flushed.Broadcast()
	err := l.err
	l.mu.Unlock()
	err = errors.Join(err, l.f.Close())
	if l.sigf != nil {
		err = errors.Join(err, l.sigf.Close())
	}
	return err
}

// HeadInterval is how often the head sidecar is rewritten while records
// are being appended (and always on Close). A crash can leave the head up to
// this far behind the log; Verify treats a head that names an earlier record
// of an intact chain as a checkpoint, not as tampering.
const HeadInterval = 250 * time.Millisecond

// SignInterval is the least time between two checkpoints of a signed log:
// a batch written sooner after the last checkpoint is signed when the
// interval is up (or on Close), together with whatever was written in
// between; a batch written later is signed at once. Either way the
// signature is made on the log's timer goroutine, not by the Append that
// wrote the batch. Signing (an Ed25519 signature and a write) once per
// batch was a tenth of the gateway's CPU time when requests arrive one by
// one. A crash can leave up to this much of the log (plus the time one
// signature takes) without a checkpoint; verify reports such a tail, as it
// did for a crash between a batch's two writes before.
const SignInterval = 5 * time.Millisecond

// writeHead replaces the head sidecar atomically.
func (l *Log) writeHead() error {
	l.mu.Lock()
	h := l.head
	l.mu.Unlock()
	if l.key != nil && h.Records > 0 {
		h.Key, h.Sig = sign(l.key, h.Seq, h.Records, h.Hash)
	}
	b, _ := json.Marshal(h)
	tmp := l.path + HeadSuffix + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("receipts: write head: %w", err)
	}
	if err := os.Rename(tmp, l.path+HeadSuffix); err != nil {
		return fmt.Errorf("receipts: write head: %w", err)
	}
	return nil
}

// Problem is one verification failure.
type Problem struct {
	// File is "" for the log itself, HeadSuffix or SigSuffix for the
	// sidecar files.
	File string
	// Line is the 1-based line number (0 for the head file).
	Line   int
	Reason string
}

// Report is the result of Verify.
type Report struct {
	Records uint64
	Head    Head
	// HeadChecked reports whether a head sidecar was compared.
	HeadChecked bool
	// AfterHead counts records after the one the head names (written
	// after the last head update, e.g. just before a crash).
	AfterHead uint64
	// Signed reports whether signatures were checked (VerifyFileSigned);
	// Checkpoints counts the valid checkpoints that matched the log.
	Signed      bool
	Checkpoints int
	Problems    []Problem
}

// OK reports whether the log verified.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// maxLine bounds a record line when verifying.
const maxLine = 1 << 20

// Verify checks a log stream: every line must be a well-formed record, the
// first record must have seq 0 and prev ZeroHash, sequence numbers must be
// consecutive, and each prev must be the SHA-256 of the previous line.
func Verify(r io.Reader) (*Report, error) { return verify(r, nil, nil) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// verify checks the chain, the head (when given) and the checkpoints (when
// cps is non-nil: every record must be covered by a checkpoint that
// matches the log).
func verify(r io.Reader, head *Head, cps []Checkpoint) (*Report, error) {
	rep := &Report{Head: Head{Hash: ZeroHash}}
	headSeen := false
	cpi := 0
	var covered uint64 // records up to the last checkpoint
	goodThrough := 0   // line of the last checkpoint that matched
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	prevHash := ZeroHash
	var prevSeq uint64
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		var rec Record
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: "not a valid record: " + err.Error()})
			prevHash = hashLine(line)
			continue
		}
		if rec.Prev != prevHash {
			if lineNo == 1 {
				rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: "first record does not start a chain (prev is not zero): earlier records were removed"})
			} else {
				rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: "prev hash does not match the previous record: a record was edited, removed, inserted or moved"})
			}
		}
		if lineNo == 1 {
			if rec.Seq != 0 {
				rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: fmt.Sprintf("first record has seq %d, want 0", rec.Seq)})
			}
		} else if rec.Seq != prevSeq+1 {
			rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: fmt.Sprintf("seq %d follows %d", rec.Seq, prevSeq)})
		}
		if rec.Decision != Allow && rec.Decision != Deny {
			rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: fmt.Sprintf("decision %q is neither allow nor deny", rec.Decision)})
		}
		prevSeq = rec.Seq
		prevHash = hashLine(line)
		rep.Records++
		rep.Head = Head{Seq: rec.Seq, Hash: prevHash, Records: rep.Records}
		if head != nil && head.Records == rep.Records {
			headSeen = true
			if head.Hash != prevHash || head.Seq != rec.Seq {
				rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: fmt.Sprintf("record %d does not match the head file (hash %.12s, head says %.12s): the log was edited", rec.Seq, prevHash, head.Hash)})
			}
		}
		for cpi < len(cps) && cps[cpi].Records == rep.Records {
			if cps[cpi].Hash != prevHash {
				rep.Problems = append(rep.Problems, Problem{Line: lineNo, Reason: fmt.Sprintf("record %d does not match its signed checkpoint: it or a record after line %d (the last matching checkpoint) was changed, removed or inserted", rec.Seq, goodThrough)})
			} else {
				goodThrough = lineNo
				rep.Checkpoints++
			}
			covered = rep.Records
			cpi++
		}
	}
	if err := sc.Err(); err != nil {
		return rep, fmt.Errorf("receipts: read: %w", err)
	}
	if head != nil {
		rep.HeadChecked = true
		switch {
		case head.Records == 0:
		case !headSeen:
			rep.Problems = append(rep.Problems, Problem{File: HeadSuffix, Reason: fmt.Sprintf("the head file names record %d (%d records) but the log has only %d: the tail was truncated", head.Seq, head.Records, rep.Records)})
		default:
			rep.AfterHead = rep.Records - head.Records
		}
	}
	if cps != nil {
		rep.Signed = true
		if cpi < len(cps) {
			rep.Problems = append(rep.Problems, Problem{File: SigSuffix, Reason: fmt.Sprintf("a signed checkpoint names record %d (%d records) but the log has only %d: the tail was truncated", cps[cpi].Seq, cps[cpi].Records, rep.Records)})
		}
		if rep.Records > covered {
			rep.Problems = append(rep.Problems, Problem{Line: int(covered) + 1, Reason: fmt.Sprintf("records %d to %d are not covered by any signature: appended by someone without the key, or the signature file was cut", covered, rep.Records-1)})
		}
	}
	return rep, nil
}

// VerifyFile verifies the log at path and, when its head sidecar exists,
// checks the log against it: the record the head names must be in the log
// with the same hash (an edited or truncated tail fails). Records after the
// head are accepted (the head is rewritten every HeadInterval, so a crash
// can leave it behind); the report counts them. The error wraps ErrTampered
// when the log does not verify.
func VerifyFile(path string) (*Report, error) { return verifyFile(path, nil, false) }

// VerifyFileSigned is VerifyFile plus signatures: every checkpoint in
// path + SigSuffix must verify with pub and match the log, every record
// must be covered by one (so an appended or edited record, or a missing
// signature file, fails), and a signed head must verify. allowUnsigned
// accepts a log without a signature file (written before signing existed),
// checking the chain and head only; the report says so (Signed false).
func VerifyFileSigned(path string, pub ed25519.PublicKey, allowUnsigned bool) (*Report, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, errors.New("receipts: VerifyFileSigned needs an Ed25519 public key")
	}
	return verifyFile(path, pub, allowUnsigned)
}

func verifyFile(path string, pub ed25519.PublicKey, allowUnsigned bool) (*Report, error) {
	var cps []Checkpoint
	var extra []Problem
	if pub != nil {
		c, probs, err := readCheckpoints(path+SigSuffix, pub)
		switch {
		case err == nil:
			cps, extra = c, probs
			if cps == nil {
				cps = []Checkpoint{}
			}
		case errors.Is(err, os.ErrNotExist) && allowUnsigned:
			pub = nil
		case errors.Is(err, os.ErrNotExist):
			extra = append(extra, Problem{File: SigSuffix, Reason: "no signature file: the log is unsigned (written before receipts were signed: verify with --allow-unsigned) or the file was deleted"})
			cps = []Checkpoint{}
		default:
			return nil, fmt.Errorf("receipts: %w", err)
		}
	}
	var head *Head
	hb, err := os.ReadFile(path + HeadSuffix)
	var headProblem string
	switch {
	case err == nil:
		var h Head
		if jerr := json.Unmarshal(hb, &h); jerr != nil {
			headProblem = "head file does not parse: " + jerr.Error()
		} else {
			head = &h
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("receipts: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	defer f.Close()
	rep, err := verify(f, head, cps)
	if err != nil {
		return rep, err
	}
	rep.Problems = append(rep.Problems, extra...)
	if headProblem != "" {
		rep.Problems = append(rep.Problems, Problem{File: HeadSuffix, Reason: headProblem})
	}
	if pub != nil && head != nil && head.Records > 0 {
		if head.Sig == "" {
			rep.Problems = append(rep.Problems, Problem{File: HeadSuffix, Reason: "the head file is not signed"})
		} else if err := verifySig(pub, head.Seq, head.Records, head.Hash, head.Key, head.Sig); err != nil {
			rep.Problems = append(rep.Problems, Problem{File: HeadSuffix, Reason: "head: " + err.Error()})
		}
	}
	// A final line without '\n' is an interrupted write or an edit.
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], fi.Size()-1); err == nil && last[0] != '\n' {
			rep.Problems = append(rep.Problems, Problem{Line: int(rep.Records), Reason: "log does not end with a newline: the last record is incomplete or was edited"})
		}
	}
	if !rep.OK() {
		slices.SortStableFunc(rep.Problems, func(a, b Problem) int {
			// Log lines first, in order (the first bad record leads).
			if (a.File == "") != (b.File == "") {
				if a.File == "" {
					return -1
				}
				return 1
			}
			return a.Line - b.Line
		})
		p := rep.Problems[0]
		return rep, fmt.Errorf("%w: %s%s: %d problem(s), first at line %d: %s", ErrTampered, path, p.File, len(rep.Problems), p.Line, p.Reason)
	}
	return rep, nil
}
