package landlock

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The worker asks the setsid supervisor (see notify_linux.go) on the
// socket it handed the listener over: a question is 'S' and a command's
// pid; the answer is one or more messages, each a flag (another message
// follows) and up to lineageChunk session ids, all 32-bit in this
// machine's byte order.
const (
	lineageQuestion = 5
	lineageChunk    = 1024
	// lineageTimeout bounds one question: the supervisor answers at once
	// while the sandbox lives.
	lineageTimeout = 30 * time.Second
)

// Lineage is the worker's end of the socket to its setsid supervisor.
type Lineage struct {
	mu sync.Mutex
	f  *os.File
}

// newLineage wraps the socket fd (owned from now on).
func newLineage(fd int) (*Lineage, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("supervisor socket: %w", err)
	}
	return &Lineage{f: os.NewFile(uintptr(fd), "setsid-supervisor")}, nil
}

// Sessions returns the sessions of the command whose session is root:
// root itself and every session a process of the command made with
// setsid (and theirs in turn), as far as they have not ended.
func (l *Lineage) Sessions(root int) ([]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.SetDeadline(time.Now().Add(lineageTimeout))
	var q [lineageQuestion]byte
	q[0] = 'S'
	binary.NativeEndian.PutUint32(q[1:], uint32(root))
	if _, err := l.f.Write(q[:]); err != nil {
		return nil, fmt.Errorf("landlock: ask the setsid supervisor for the sessions of %d: %w", root, err)
	}
	buf := make([]byte, 4+4*lineageChunk)
	var sids []int
	for {
		n, err := l.f.Read(buf)
		if err == nil && (n < 4 || n%4 != 0) {
			err = fmt.Errorf("a message of %d bytes", n)
		}
		if err != nil {
			return nil, fmt.Errorf("landlock: the setsid supervisor's sessions of %d: %w", root, err)
		}
		for i := 4; i < n; i += 4 {
			sids = append(sids, int(binary.NativeEndian.Uint32(buf[i:])))
		}
		if binary.NativeEndian.Uint32(buf) == 0 {
			return sids, nil
		}
	}
}
