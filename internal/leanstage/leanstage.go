// Package leanstage holds the lean stage program: the small executable that
// a landlock sandbox's two stages (namespaces and view, then
// self-restriction and the worker) run instead of the whole vak binary.
//
// Every start of a Go program initialises every package it links. The vak
// binary links the Kubernetes client, the Docker client, the MCP SDK and
// much more, so each of its starts costs about four times what a start of
// a program with only the stages' packages costs (docs/BENCHMARKS.md), and
// a sandboxed command pays for two such starts besides vak's own. The lean
// program (package program, built from entry) links only the stages, the
// worker and the native network fence.
//
// The release keeps one static binary: scripts/build-vak builds the lean
// program first and embeds it in vak (go build -overlay adds it to this
// package). At run time Path copies it once into a sealed memfd, which the
// landlock backend has the broker execute as the worker. A vak built
// without it (plain go build or go install) has nothing embedded: Path
// reports ErrNotEmbedded and the worker is vak itself, with the same
// restrictions and a slower start.
package leanstage

import (
	"errors"
	"sync"
)

// program is the lean program's bytes when scripts/build-vak built this
// vak: its go build -overlay adds a file to this package that embeds the
// program (go:embed) and sets program in an init function. Empty
// otherwise.
var program string

// ErrNotEmbedded reports a vak built without the lean stage program (plain
// go build or go install instead of scripts/build-vak).
var ErrNotEmbedded = errors.New("no lean stage program embedded in this build (build vak with scripts/build-vak)")

// Embedded returns the size in bytes of the embedded lean program, or 0.
func Embedded() int64 { return int64(len(program)) }

var (
	once    sync.Once
	path    string
	pathErr error
)

// Path returns a path that executes the embedded lean stage program
// (/proc/self/fd/N of a sealed memfd, made on the first call and kept open
// for the life of the process), ErrNotEmbedded when this build has none,
// or why the memfd could not be made. Its command line is the vak binary's
// worker command (sandbox.WorkerCommand and --stage).
func Path() (string, error) {
	once.Do(func() {
		if program == "" {
			pathErr = ErrNotEmbedded
			return
		}
		path, pathErr = sealedExecutable(program)
	})
	return path, pathErr
}
