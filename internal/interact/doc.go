// Package interact is vak's side of an interactive command: the user's
// terminal relayed to a terminal of the command's own (raw mode, typed-ahead
// input, window size), and the signals vak receives while such a command
// runs (the first SIGINT goes to the command, a second one, SIGTERM or SIGHUP
// tear the run down). `vak run -i/-t` and `vak session exec -i/-t` use it;
// the command itself runs through the broker (broker.Session.BashInteractive)
// or a session's exec.
package interact
