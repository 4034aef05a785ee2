package worker

import (
	"strings"
	"syscall"
)

// shellSignals are the messages POSIX sh (dash, through the C library's
// strsignal) prints when the command it waits for is killed by a signal.
var shellSignals = map[syscall.Signal]string{
	syscall.SIGHUP:    "Hangup",
	syscall.SIGQUIT:   "Quit",
	syscall.SIGILL:    "Illegal instruction",
	syscall.SIGTRAP:   "Trace/breakpoint trap",
	syscall.SIGABRT:   "Aborted",
	syscall.SIGBUS:    "Bus error",
	syscall.SIGFPE:    "Floating point exception",
	syscall.SIGKILL:   "Killed",
	syscall.SIGUSR1:   "User defined signal 1",
	syscall.SIGSEGV:   "Segmentation fault",
	syscall.SIGUSR2:   "User defined signal 2",
	syscall.SIGALRM:   "Alarm clock",
	syscall.SIGTERM:   "Terminated",
	syscall.SIGCHLD:   "Child exited",
	syscall.SIGCONT:   "Continued",
	syscall.SIGURG:    "Urgent I/O condition",
	syscall.SIGXCPU:   "CPU time limit exceeded",
	syscall.SIGXFSZ:   "File size limit exceeded",
	syscall.SIGVTALRM: "Virtual timer expired",
	syscall.SIGPROF:   "Profiling timer expired",
	syscall.SIGWINCH:  "Window changed",
	syscall.SIGIO:     "I/O possible",
	syscall.SIGSYS:    "Bad system call",
}

// shellSignalMessage is the line `sh -c` prints on its stderr when its
// command was killed by ws's signal, "" for none: SIGINT and SIGPIPE are
// silent, as in dash.
func shellSignalMessage(ws syscall.WaitStatus) string {
	sig := ws.Signal()
	if sig == syscall.SIGINT || sig == syscall.SIGPIPE {
		return ""
	}
	msg, ok := shellSignals[sig]
	if !ok {
		// Signals whose C library text is not in the table: Go's name,
		// capitalised like the others.
		name := sig.String()
		msg = strings.ToUpper(name[:1]) + name[1:]
	}
	if ws.CoreDump() {
		msg += " (core dumped)"
	}
	return msg + "\n"
}
