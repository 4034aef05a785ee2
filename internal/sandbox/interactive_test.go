package sandbox

import (
	"errors"
	"testing"
)

type fakeInteractiveWrapper struct{ fakeWrapper }

func (fakeInteractiveWrapper) WrapInteractive(Command, bool) ([]string, error) { return nil, nil }

// TestCheckInteractive: the capability query accepts process-scoped
// backends and command-scoped ones that implement InteractiveWrapper, and
// refuses a wrapper without it.
func TestCheckInteractive(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    Backend
		ok   bool
	}{
		{"process", fakeProcess{}, true},
		{"wrapper", fakeWrapper{}, false},
		{"interactive wrapper", fakeInteractiveWrapper{}, true},
	} {
		err := CheckInteractive(tc.b)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrNoInteractive)) {
			t.Errorf("%s: CheckInteractive = %v", tc.name, err)
		}
	}
}
