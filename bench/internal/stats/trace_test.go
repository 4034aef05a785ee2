package stats

import (
	"testing"
	"time"
)

func TestParseTraceLine(t *testing.T) {
	tests := []struct {
		line       string
		ok         bool
		name       string
		start, dur time.Duration
	}{
		{"vak trace: config +0.179ms 0.114ms", true, "config", 179 * time.Microsecond, 114 * time.Microsecond},
		{"vak trace: worker start (sandbox set-up) to ready +2.097ms 17.828ms", true, "worker start (sandbox set-up) to ready", 2097 * time.Microsecond, 17828 * time.Microsecond},
		{"vak trace: total +0.000ms 44.014ms", true, "total", 0, 44014 * time.Microsecond},
		{"from the command: vak trace: x +1ms 1ms", false, "", 0, 0},
		{"vak trace: short", false, "", 0, 0},
		{"vak trace: bad +x 1ms", false, "", 0, 0},
	}
	for _, tc := range tests {
		name, start, dur, ok := parseTraceLine(tc.line)
		if ok != tc.ok || name != tc.name || (ok && (start.Round(time.Microsecond) != tc.start || dur.Round(time.Microsecond) != tc.dur)) {
			t.Errorf("%q: got %q %v %v %v", tc.line, name, start, dur, ok)
		}
	}
}
