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
		{nil, nil},
		{Mark(Config, errors.New("plain")), Config},
		{fmt.Errorf("wrapped: %w", Mark(Invalid, errors.New("bad flag"))), Invalid},
		{Mark(Invalid, nil), nil},
	}
	for _, tc := range tests {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", errDown), errDown) {
		t.Error("a sentinel must still match itself")
	}
	if err := Mark(Invalid, errDown); err.Error() != "daemon down" || !errors.Is(err, errDown) {
		t.Errorf("Mark(Invalid, errDown) = %q: want its message and its cause kept", err)
	}
	if errors.Is(errDown, errBad) {
		t.Error("two sentinels of different classes must not match each other")
	}
}
