package errclass

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	errDown := New(Unavailable, "daemon down")
	errBad := New(Invalid, "no such thing")
	tests := []struct {
		err  error
		want *Class
	}{
		{errDown, Unavailable},
		{fmt.Errorf("start: %w", errDown), Unavailable},
		{fmt.Errorf("create: %w: %w", errBad, errors.New("cause")), Invalid},
		{New(Config, "bad file"), Config},
		{errors.New("plain"), nil},
		{fmt.Errorf("lost: %v", errDown), nil}, // %v drops the class
		{Wrap(Invalid, errors.New("--pool: bad")), Invalid},
		{fmt.Errorf("x: %w", Wrap(Unavailable, errors.New("down"))), Unavailable},
		{Wrap(Unavailable, fmt.Errorf("load: %w", New(Config, "bad file"))), Config}, // the most specific wins
		{nil, nil},
	}
	for _, tc := range tests {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", errDown), errDown) {
		t.Error("a sentinel must still match itself")
	}
	if w := Wrap(Invalid, errDown); w.Error() != "daemon down" || !errors.Is(w, errDown) {
		t.Errorf("Wrap(Invalid, errDown) = %q: want the same message, still matching errDown", w)
	}
	if Wrap(Invalid, nil) != nil {
		t.Error("Wrap(c, nil) must be nil")
	}
	if errors.Is(errDown, errBad) {
		t.Error("two sentinels of different classes must not match each other")
	}
}
