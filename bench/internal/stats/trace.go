package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// TraceBreakdown runs argv (a vak run) n times with VAK_TRACE=1 and returns
// a Markdown table of the median start and duration of every phase it
// printed, in the order of the first run, so a benchmark can show where
// the time goes under its table.
func TraceBreakdown(n int, argv ...string) (string, error) {
	type phase struct{ start, dur Sample }
	phases := map[string]*phase{}
	var order []string
	for range n {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "VAK_TRACE=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%q: %w: %s", argv, err, stderr.Bytes())
		}
		sc := bufio.NewScanner(&stderr)
		for sc.Scan() {
			name, start, dur, ok := parseTraceLine(sc.Text())
			if !ok {
				continue
			}
			p := phases[name]
			if p == nil {
				p = &phase{}
				phases[name] = p
				order = append(order, name)
			}
			p.start.Add(start)
			p.dur.Add(dur)
		}
	}
	if len(order) == 0 {
		return "", fmt.Errorf("%q printed no trace", argv)
	}
	out := fmt.Sprintf("| phase (`VAK_TRACE=1`, n=%d) | median start | median duration |\n|---|---:|---:|\n", n)
	for _, name := range order {
		p := phases[name]
		out += fmt.Sprintf("| %s | +%s | %s |\n", name, Ms(p.start.Median()), Ms(p.dur.Median()))
	}
	return out, nil
}

// parseTraceLine parses "vak trace: NAME +1.234ms 5.678ms".
func parseTraceLine(l string) (string, time.Duration, time.Duration, bool) {
	rest, ok := strings.CutPrefix(l, "vak trace: ")
	if !ok {
		return "", 0, 0, false
	}
	f := strings.Fields(rest)
	if len(f) < 3 {
		return "", 0, 0, false
	}
	start, err1 := parseMs(strings.TrimPrefix(f[len(f)-2], "+"))
	dur, err2 := parseMs(f[len(f)-1])
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return strings.Join(f[:len(f)-2], " "), start, dur, true
}

func parseMs(s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "ms"), 64)
	return time.Duration(v * float64(time.Millisecond)), err
}
