// Package errclass gives vak's sentinel errors a class: what went wrong from
// the caller's point of view (a component is unavailable, the request is
// invalid, the config is). The command line maps a class to an exit status
// in one place, instead of listing every package's sentinels; a new
// sentinel only has to say its class where it is declared.
//
// A sentinel made with New matches its class with errors.Is, and so does
// every error that wraps it with %w.
package errclass

import "errors"

// Class is a kind of failure.
type Class struct{ name string }

func (c *Class) Error() string { return c.name }

// The classes.
var (
	// Unavailable: something vak needs cannot run here or now (a daemon is
	// down, a kernel lacks a feature, a network cannot come up); nothing ran.
	Unavailable = &Class{"unavailable"}
	// Invalid: the request names something that does not exist or that vak
	// refuses (an unknown session, a forbidden mount, a disallowed variable).
	Invalid = &Class{"invalid request"}
	// Config: a config file is invalid; nothing ran.
	Config = &Class{"invalid config"}
	// Internal: vak itself failed (its state directory cannot be made, its
	// own executable cannot be found); not the request's fault.
	Internal = &Class{"internal error"}
)

// classes lists every class, most specific first.
var classes = []*Class{Config, Unavailable, Invalid, Internal}

// New returns a sentinel error with message msg and class c.
func New(c *Class, msg string) error { return &sentinel{msg: msg, class: c} }

type sentinel struct {
	msg   string
	class *Class
}

func (e *sentinel) Error() string        { return e.msg }
func (e *sentinel) Is(target error) bool { return target == e.class }

// Of returns the class of err, or nil when it has none.
func Of(err error) *Class {
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// Wrap returns err with class c added: the same message, and errors.Is
// matches c as well as everything err matches (a class err already has
// still counts: Of returns the most specific). Wrap(c, nil) is nil.
func Wrap(c *Class, err error) error {
	if err == nil {
		return nil
	}
	return &classed{err: err, class: c}
}

type classed struct {
	err   error
	class *Class
}

func (e *classed) Error() string        { return e.err.Error() }
func (e *classed) Unwrap() error        { return e.err }
func (e *classed) Is(target error) bool { return target == e.class }
