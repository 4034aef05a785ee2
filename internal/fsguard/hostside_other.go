//go:build !linux

package fsguard

// Tree is a workspace opened for host-side maintenance (Linux only).
type Tree struct{ path string }

// OpenTree fails with ErrUnsupported: beneath-resolution needs openat2.
func OpenTree(workspace string) (*Tree, error) { return nil, errUnsupported }

// Path is the workspace path.
func (t *Tree) Path() string { return t.path }

// Root fails with ErrUnsupported.
func (t *Tree) Root() (dev, ino uint64, err error) { return 0, 0, errUnsupported }

// Close does nothing.
func (t *Tree) Close() error { return errUnsupported }

// Stat fails with ErrUnsupported.
func (t *Tree) Stat(rel string) (Entry, error) { return Entry{}, errUnsupported }

// Remove fails with ErrUnsupported.
func (t *Tree) Remove(rel string) error { return errUnsupported }

// Usage is what a tree holds, counted without following links.
type Usage struct {
	Bytes     int64
	Entries   int
	Truncated bool
}

// Usage fails with ErrUnsupported.
func (t *Tree) Usage() (Usage, error) { return Usage{}, errUnsupported }

// Scan fails with ErrUnsupported.
func (t *Tree) Scan(setuid bool) (Scan, error) { return Scan{}, errUnsupported }

// ClearSetuid fails with ErrUnsupported.
func (t *Tree) ClearSetuid(rel string) (uint32, error) { return 0, errUnsupported }

// Plan fails with ErrUnsupported.
func (t *Tree) Plan(protected []string) (Plan, error) { return Plan{}, errUnsupported }
