// Package archtest holds vak's architecture tests: which package may depend
// on which (built on `go list -deps`), that every package says what it is
// for, and that the package map in docs/ARCHITECTURE.md matches the tree. It
// has no code of its own; the rules are in its tests.
package archtest
