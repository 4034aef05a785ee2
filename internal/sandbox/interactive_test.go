package sandbox

import (
	"context"
	"errors"
	"testing"
)

type fakeBackend struct{ scope Scope }

func (f fakeBackend) Name() string                    { return "fake" }
func (f fakeBackend) Scope() Scope                    { return f.scope }
func (f fakeBackend) Available(context.Context) error { return nil }

type fakeWrapper struct{ fakeBackend }

func (fakeWrapper) Wrap(Command) ([]string, error)           { return nil, nil }
func (fakeWrapper) HostEnv() []string                        { return nil }
func (fakeWrapper) Remove(context.Context, string) error     { return nil }
func (fakeWrapper) WrapperFailed(context.Context, int) error { return nil }

type fakeInteractiveWrapper struct{ fakeWrapper }

func (fakeInteractiveWrapper) WrapInteractive(Command, bool) ([]string, error) { return nil, nil }

// TestCheckInteractive: the capability query accepts process-scoped
// backends and command-scoped ones that implement InteractiveWrapper, and
// refuses a wrapper without it, naming the backend.
func TestCheckInteractive(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    Backend
		ok   bool
	}{
		{"process", fakeBackend{ScopeProcess}, true},
		{"wrapper", fakeWrapper{fakeBackend{ScopeCommand}}, false},
		{"interactive wrapper", fakeInteractiveWrapper{fakeWrapper{fakeBackend{ScopeCommand}}}, true},
	} {
		err := CheckInteractive(tc.b)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrNoInteractive)) {
			t.Errorf("%s: CheckInteractive = %v", tc.name, err)
		}
	}
}
