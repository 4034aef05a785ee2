//go:build !linux

package worker

// watchHangUp watches nothing here: requests in flight when a client
// leaves run to their end (see hangup_linux.go).
func watchHangUp(c any, hungUp func()) (stop func()) { return func() {} }
