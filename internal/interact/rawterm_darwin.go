package interact

import "golang.org/x/sys/unix"

// The terminal mode requests and the value of a disabled control
// character (_POSIX_VDISABLE) here.
const (
	ioctlGetTermios = unix.TIOCGETA
	ioctlSetTermios = unix.TIOCSETA
	vdisable        = 0xff
)

// OwnTerminals says whether vak gives a command it relays a terminal of its
// own here (worker.Exec's pseudo-terminals are Linux-only).
const OwnTerminals = false
