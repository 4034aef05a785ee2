package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"vak/bench/internal/stats"
)

// sequential runs `true` under every contender, one command at a time,
// n rounds after two of warm-up, the order rotating every round so no
// contender always follows the same one.
func sequential(cs []*contender, n int, e *env) {
	for i := -2; i < n; i++ {
		for j := range cs {
			c := cs[(j+max(i, 0))%len(cs)]
			d, err := e.run(c, "true")
			if i < 0 {
				continue
			}
			c.seqRuns++
			if err != nil {
				c.fail(err)
				continue
			}
			c.seq.Add(d)
		}
	}
}

// bursts starts size commands of each contender at once, rounds times
// after one warm-up burst, and records each command's own wall time.
func bursts(cs []*contender, size, rounds int, e *env) {
	for i := -1; i < rounds; i++ {
		for j := range cs {
			c := cs[(j+max(i, 0))%len(cs)]
			ds, errs := make([]time.Duration, size), make([]error, size)
			var wg sync.WaitGroup
			for k := range size {
				wg.Go(func() { ds[k], errs[k] = e.run(c, "true") })
			}
			wg.Wait()
			if i < 0 {
				continue
			}
			for k := range size {
				c.burstRuns++
				if errs[k] != nil {
					c.fail(errs[k])
					continue
				}
				c.burst.Add(ds[k])
			}
		}
	}
}

func (c *contender) fail(err error) {
	if c.firstErr == "" {
		c.firstErr = err.Error()
	}
}

// table prints one row per contender: the containment check, then
// median, p95, p99 and success rate, sequential and (withBurst) in bursts;
// the sequential median is also given relative to the first contender's
// (the floor, exec of `true`).
func table(cs []*contender, withBurst bool) string {
	var b strings.Builder
	b.WriteString("| contender | kind | write outside the workspace blocked | median | p95 | p99 | ok | median vs " + cs[0].name + " |")
	sep := "|---|---|---|---:|---:|---:|---:|---:|"
	if withBurst {
		b.WriteString(" burst median | burst p95 | burst p99 | burst ok |")
		sep += "---:|---:|---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	base := cs[0].seq.Median()
	for _, c := range cs {
		ratio := "–"
		if base > 0 && len(c.seq.D) > 0 {
			ratio = fmt.Sprintf("%.1f×", float64(c.seq.Median())/float64(base))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |", c.name, c.kind, c.contained,
			ms(&c.seq, 0.5), ms(&c.seq, 0.95), ms(&c.seq, 0.99), rate(len(c.seq.D), c.seqRuns), ratio)
		if withBurst {
			fmt.Fprintf(&b, " %s | %s | %s | %s |", ms(&c.burst, 0.5), ms(&c.burst, 0.95), ms(&c.burst, 0.99), rate(len(c.burst.D), c.burstRuns))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func ms(s *stats.Sample, q float64) string {
	if len(s.D) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f ms", float64(s.Quantile(q))/float64(time.Millisecond))
}

func rate(ok, all int) string {
	if all == 0 {
		return "–"
	}
	return fmt.Sprintf("%d/%d", ok, all)
}
