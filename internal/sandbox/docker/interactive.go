package docker

import "vak/internal/sandbox"

// KeeperInit is the init (PID 1) of an interactive command's container: it
// runs nothing itself. It says "ready" on its stdout once the container
// runs, then reads its stdin, the lifeline, until EOF and kills every
// process of the container (the command, which `docker exec` started in
// it), and exits, which ends the container. Shell built-ins only.
const KeeperInit = `echo ready; while read -r _; do :; done; kill -KILL -1`

// interactiveScript is the host shell program that runs an interactive
// command (see WrapInteractive). $1 is the docker CLI, $2 the container's
// name, $3 the exec flags (-i or -it), $4 the command; the docker run argv
// of the keeper follows them. Its stdin is the user's input (with -it: a
// terminal the worker owns), fd 3 the lifeline. The keeper's "ready" line
// (or EOF, if docker run failed: exit 125, docker run's own failure) gates
// the exec; when the command ends, the keeper's container is killed and
// the exit status is the command's. With a terminal, the command starts
// at the size of the worker's terminal: the docker CLI sets the size of
// the exec's terminal only after the command started, so a command that
// asks at once would see 0x0 (the CLI follows later changes itself).
//
// Signals: `docker exec` forwards none to the command, and the worker
// signals this script alone (wire.OpSignal; sandbox.InteractiveWrapper).
// The script runs the pipeline in the background (a trap runs only between
// commands, and `wait` is the one wait a trapped signal interrupts) and
// forwards each signal it traps (the names of wire.Signals) into the
// container: a `docker exec` of the shell built-in `kill -s SIG -1`, which
// reaches every process of the container but its init (the keeper) and the
// killer itself, that is the command and everything it started, confined
// to the container's PID namespace. A signal that arrives before the
// command started in the container reaches nothing. Background commands
// ignore SIGINT and SIGQUIT here (no job control), so the docker CLIs are
// not interrupted by a terminal's Ctrl-C either.
const interactiveScript = `d=$1 n=$2 f=$3 c=$4; shift 4
r=0 k=0
if [ "$f" = -it ] && z=$(stty size 2>/dev/null); then r=${z% *} k=${z#* }; fi
fwd() { t=1; "$d" exec "$n" sh -c 'kill -s "$1" -1' vak-signal "$1" </dev/null >/dev/null 2>&1; }
for g in INT TERM HUP QUIT USR1 USR2 WINCH; do trap "fwd $g" "$g"; done
exec 4<&0
"$@" <&3 3<&- 4<&- | { read -r _ || exit 125; "$d" exec "$f" "$n" sh -c 'if [ "$1" -gt 0 ] 2>/dev/null; then stty rows "$1" cols "$2" 2>/dev/null; fi; exec sh -c "$3"' vak-run "$r" "$k" "$c" <&4 4<&- 3<&-; s=$?; "$d" kill "$n" >/dev/null 2>&1; exit $s; } &
p=$!
while :; do t=; wait "$p"; s=$?; [ -n "$t" ] && [ "$s" -gt 128 ] || break; done
exit "$s"`

var _ sandbox.InteractiveWrapper = (*Backend)(nil)

// WrapInteractive implements sandbox.InteractiveWrapper. The command's
// container is the one Wrap describes, but its init is KeeperInit, whose
// stdin is the lifeline (fd 3 of the argv, see sandbox.InteractiveLifelineFD)
// instead of the user's input; the command itself runs in it through
// `docker exec -i` (with tty: `-it`, a terminal the daemon allocates inside
// the container and the docker CLI relays and resizes), with the
// container's user, working directory and environment. The command never
// holds a descriptor of a terminal outside the container. When the broker
// dies, the lifeline reaches EOF and the keeper kills the command and ends
// the container, as for Wrap.
func (b *Backend) WrapInteractive(c sandbox.Command, tty bool) ([]string, error) {
	run, sp, err := b.runArgs(c)
	if err != nil {
		return nil, err
	}
	flags := "-i"
	if tty {
		flags = "-it"
	}
	argv := []string{"sh", "-c", interactiveScript, "vak-run-interactive", b.binary(), ContainerName(c.ID), flags, c.Shell}
	argv = append(argv, run...)
	return append(argv, sp.keeperArgv()...), nil
}
