//go:build !linux

package procfs

// Stat is unsupported here.
func Stat(int) (Proc, error) { return Proc{}, ErrUnsupported }

// All is empty here.
func All() []Proc { return nil }

// Tgid is unsupported here.
func Tgid(int) (int, error) { return 0, ErrUnsupported }
