package landlock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"vak/internal/procfs"
)

// The worker starts each command as the leader of a new session and kills a
// timed-out or canceled command by its session id. A process the command
// starts may leave that session with setsid(2), as it would outside the
// sandbox: that is how a tool leaves the terminal of the agent that runs it
// (without a session of its own it could open the agent's terminal through
// /dev/tty, and a tool that prompts there would stop the agent's screen).
// The kill must still reach it. So the seccomp filter turns setsid into a
// user notification answered by a supervisor outside the worker, which
// records, before it lets the call proceed, which command's session the new
// one descends from (the session the caller is leaving, or the command that
// session descends from). The worker asks it for a command's sessions when
// it kills the command (Lineage), and kills every process in any of them.
// The worker's own direct children (the commands it is launching, between
// fork and exec) start new commands: no process in the sandbox can make the
// worker its parent (the filter refuses CLONE_PARENT, and the worker is no
// subreaper), so no command's descendant is taken for one.

// The supervisor must be another process. The command being launched calls
// setsid in the worker's vfork child, which blocks until the notification
// is answered, while the worker's forking thread is suspended in the kernel
// holding its Go P. A supervisor goroutine in the worker could then wait
// forever for a stop-the-world garbage collection that waits for that
// thread. Stage 1 (with namespaces) or the broker (without) answers
// instead: it receives the listener from stage 2 over a socketpair, and
// answers the worker's questions on the same socket.

// SupervisorFD is the descriptor on which stage 2 finds the socket to its
// supervisor (the second extra file).
const SupervisorFD = 4

// SupervisorPair returns a connected pair: local stays with the supervisor,
// remote is handed to stage 2 as SupervisorFD.
func SupervisorPair() (local, remote *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("landlock: supervisor socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "supervised"), nil
}

// Supervise receives stage 2's listener on local and then, for the rest of
// the sandbox's life, answers setsid notifications (recording each new
// session's command, see above) and the worker's questions on local
// (Lineage). worker is the worker's pid as this process sees it.
func Supervise(local *os.File, worker int) {
	defer local.Close()
	fd, ok := receiveListener(local)
	if !ok {
		return
	}
	defer unix.Close(fd)
	// Best effort: a kernel without it (before Linux 6.6) refuses the
	// flag, and the hand-off is then an ordinary wake-up, as it always was.
	syncWakeUp(fd)
	newSupervisor(fd, int(local.Fd()), worker).serve()
}

// receiveListener reads the listener stage 2 sends on local (handOver).
// ok is false if stage 2 died before restricting itself.
func receiveListener(local *os.File) (fd int, ok bool) {
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(local.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return -1, false
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, false
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, false
	}
	return fds[0], true
}

// syncWakeUp sets SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on the listener
// (Linux 6.6): the kernel then wakes the supervisor on the CPU of the task
// that notified, and that task on the supervisor's when it is answered. A
// setsid notification is a strict hand-off (the command's fork child waits
// for the answer, the supervisor waits for the next notification), which
// otherwise costs a wake-up on another CPU, often an idle one, each way.
// Older kernels refuse the ioctl (EINVAL).
func syncWakeUp(fd int) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
	if e != 0 {
		return fmt.Errorf("landlock: seccomp listener: set SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: %w", e)
	}
	return nil
}

// NotifySetsid makes setsid, on every thread of this process and in
// everything it starts, a user notification answered by the supervisor
// on SupervisorFD (Supervise), and filters nothing else: the session
// tracking of stage 2 without the rest of its sandbox. no_new_privs is
// set first. The Lineage asks that supervisor, as the worker's does.
// Tests of the supervision and bench/landlock's floor of this design use
// it; stage 2 loads the whole filter instead (installSeccomp).
func NotifySetsid() (*Lineage, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("landlock: no_new_privs: %w", err)
	}
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SETSID, SkipFalse: 1},
		bpf.RetConstant{Val: retNotify},
		bpf.RetConstant{Val: retAllow},
	})
	if err != nil {
		return nil, fmt.Errorf("landlock: setsid filter: %w", err)
	}
	listener, err := loadFilter(prog)
	if err != nil {
		return nil, fmt.Errorf("landlock: %w", err)
	}
	return handOver(listener)
}

// handOver sends the listener to the supervisor and closes it here: the
// worker (and everything it starts) never holds it. The socket stays open
// for the worker's questions (the Lineage returned).
func handOver(listener int) (*Lineage, error) {
	defer unix.Close(listener)
	var st unix.Stat_t
	if err := unix.Fstat(SupervisorFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("no supervisor socket on fd %d", SupervisorFD)
	}
	if err := unix.Sendmsg(SupervisorFD, []byte("L"), unix.UnixRights(listener), nil, 0); err != nil {
		unix.Close(SupervisorFD)
		return nil, fmt.Errorf("hand the seccomp listener to the supervisor: %w", err)
	}
	return newLineage(SupervisorFD)
}

// seccompNotif and seccompNotifResp mirror struct seccomp_notif and
// struct seccomp_notif_resp (linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// supervisor answers the setsid notifications of one sandbox and the
// worker's questions about the sessions they made.
type supervisor struct {
	listener int // the seccomp listener
	queries  int // the worker's end of the socket it asks on, or -1
	worker   int // the worker's pid
	// rootOf maps a session made by a command's descendant to the
	// command's session (a command's own session is not in it).
	rootOf map[int]int
	// pruneAt is the size of rootOf at which sessions that have ended
	// are dropped from it.
	pruneAt int
}

// minPrune is the smallest pruneAt.
const minPrune = 256

func newSupervisor(listener, queries, worker int) *supervisor {
	return &supervisor{listener: listener, queries: queries, worker: worker, rootOf: map[int]int{}, pruneAt: minPrune}
}

// serve answers notifications and questions until no process uses the
// filter any more (or the listener fails).
//
// The listener polls POLLHUP once the filter has no user left (every
// sandboxed process exited and was reaped). Without that check the loop
// would never end: recent kernels (6.18 here) answer RECV on such a filter
// with ENOENT at once, which the loop took for a caller that died and
// retried, at full speed, for as long as the supervising process lived (the
// broker, when there is no stage 1); older ones block RECV for good. The
// poll costs one system call per notification.
func (s *supervisor) serve() {
	pfd := s.pollFDs()
	for s.step(pfd) {
	}
}

// pollFDs is what serve polls: the listener, then the question socket.
func (s *supervisor) pollFDs() []unix.PollFd {
	return []unix.PollFd{{Fd: int32(s.listener), Events: unix.POLLIN}, {Fd: int32(s.queries), Events: unix.POLLIN}}
}

// step waits for the listener or a question (pfd, from pollFDs) and
// handles what came; false ends the supervisor. When the worker's end of
// the question socket is gone (it closed it, or exited while the
// sandbox's other processes still use the filter), the socket stays
// readable at its end for good: it is dropped from pfd, or every poll
// would return at once and the supervisor would spin on it.
func (s *supervisor) step(pfd []unix.PollFd) bool {
	pfd[0].Revents, pfd[1].Revents = 0, 0
	if _, err := unix.Poll(pfd, -1); err != nil {
		if errors.Is(err, unix.EINTR) {
			return true
		}
		fmt.Fprintf(os.Stderr, "vak: setsid supervisor stopped: %v\n", err)
		return false
	}
	switch ev := pfd[0].Revents; {
	case ev&unix.POLLIN != 0:
		// A notification waits: answer it first, even with POLLHUP.
		if err := s.answer(); err != nil {
			fmt.Fprintf(os.Stderr, "vak: setsid supervisor stopped: %v\n", err)
			return false
		}
	case ev&unix.POLLHUP != 0:
		return false // no process uses the filter any more
	case ev != 0:
		fmt.Fprintf(os.Stderr, "vak: setsid supervisor stopped: poll events %#x\n", ev)
		return false
	}
	if ev := pfd[1].Revents; ev&unix.POLLIN != 0 {
		if !s.reply() {
			pfd[1].Fd = -1 // the worker is gone: no more questions
		}
	} else if ev != 0 {
		pfd[1].Fd = -1
	}
	return true
}

// answer receives one notification, records the session it makes and lets
// it proceed (or refuses it with EPERM where the caller cannot be told
// apart). An error ends the supervisor.
func (s *supervisor) answer() error {
	var req seccompNotif
	if err := ioctl(s.listener, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
			return nil // interrupted, or the caller died before we read it
		}
		return err
	}
	record, ok := s.classify(int(req.Pid))
	id := req.ID
	// The pid might have died and been reused while /proc was read:
	// only trust the answer if the notification is still live.
	if err := ioctl(s.listener, notifIDValid, unsafe.Pointer(&id)); err != nil {
		return nil
	}
	resp := seccompNotifResp{ID: req.ID}
	if ok {
		record()
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	} else {
		resp.Error = -int32(unix.EPERM)
	}
	ioctl(s.listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	return nil
}

// classify reads the thread tid that asks for setsid and returns how to
// record the session it will make; ok is false if it cannot be read (it
// is refused: its session would not be known). The worker's own child is
// a command being launched: its session is a command's. (The seccomp
// filter refuses CLONE_PARENT, so no other process has the worker for its
// parent.) Anyone else's new session (its process's pid) descends from the
// command of the session it leaves. A session leader asking again changes
// nothing (the kernel refuses it): a command must not forget its own
// sessions by calling setsid again.
func (s *supervisor) classify(tid int) (record func(), ok bool) {
	p, err := procfs.Stat(tid)
	if err != nil {
		return nil, false
	}
	if p.SID == tid {
		return func() {}, true
	}
	if p.PPID == s.worker {
		return func() { s.newCommand(tid) }, true
	}
	pid, err := procfs.Tgid(tid)
	if err != nil {
		return nil, false
	}
	if pid == p.SID {
		return func() {}, true
	}
	return func() {
		root, ok := s.rootOf[p.SID]
		if !ok {
			root = p.SID
		}
		if len(s.rootOf) >= s.pruneAt {
			s.prune()
		}
		s.rootOf[pid] = root
	}, true
}

// newCommand records that the command pid starts: its session is its own.
// Sessions recorded as made by an earlier command that bore the same pid
// (it has ended, or its pid could not be reused) are that command's
// leftovers, not this one's: they are forgotten.
func (s *supervisor) newCommand(pid int) {
	delete(s.rootOf, pid)
	for sid, root := range s.rootOf {
		if root == pid {
			delete(s.rootOf, sid)
		}
	}
}

// reply answers one question of the worker (Lineage.Sessions). It returns
// false once no more can come: the worker's end is closed (a read of
// nothing) or the socket failed.
func (s *supervisor) reply() bool {
	var q [lineageQuestion]byte
	n, err := unix.Read(s.queries, q[:])
	switch {
	case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
		return true
	case err != nil || n == 0:
		return false
	case n != len(q) || q[0] != 'S':
		return true // not a question: ignored
	}
	root := int(binary.NativeEndian.Uint32(q[1:]))
	sids := []int{root}
	for sid, r := range s.rootOf {
		if r == root {
			sids = append(sids, sid)
		}
	}
	for {
		k := min(len(sids), lineageChunk)
		msg := make([]byte, 4+4*k)
		if len(sids) > k {
			binary.NativeEndian.PutUint32(msg, 1) // another message follows
		}
		for i, sid := range sids[:k] {
			binary.NativeEndian.PutUint32(msg[4+4*i:], uint32(sid))
		}
		if _, err := unix.Write(s.queries, msg); err != nil {
			return false
		}
		if sids = sids[k:]; len(sids) == 0 {
			return true
		}
	}
}

// prune forgets the sessions that have ended: a session with no process
// left never gets one (setsid makes a new one, named by the caller's pid,
// and the kernel does not reuse a pid while a session bears it).
func (s *supervisor) prune() {
	live := map[int]bool{}
	for _, p := range procfs.All() {
		live[p.SID] = true
	}
	for sid := range s.rootOf {
		if !live[sid] {
			delete(s.rootOf, sid)
		}
	}
	s.pruneAt = max(minPrune, 2*len(s.rootOf))
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}
