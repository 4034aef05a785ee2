//go:build linux && !amd64 && !arm64

package landlock

// No filter for this architecture: installSeccomp fails, so the sandbox
// refuses to start (fail closed).
const (
	nativeArch = 0
	x32Bit     = 0
)

var archDenied = []uintptr{}

var archModeSyscalls = []modeArg{}

const notifIDValid = 0
