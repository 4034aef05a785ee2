package stats

import (
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"time"
)

// Interval is a ratio of medians and its bootstrap confidence interval.
type Interval struct {
	Ratio  float64 // median(other) / median(base)
	Lo, Hi float64 // the interval's ends
	Level  float64 // e.g. 0.95
}

// MedianRatioInterval is the ratio of other's median to base's and its
// percentile bootstrap interval at level (e.g. 0.95). The two samples are
// paired by round (the benches interleave contenders, so round i of each
// ran under the same conditions): each resample draws rounds with
// replacement and keeps the pairs. The seed is fixed, so a run's numbers
// reproduce from its samples.
func MedianRatioInterval(base, other *Sample, level float64) (Interval, error) {
	n := len(base.D)
	if n == 0 || n != len(other.D) {
		return Interval{}, fmt.Errorf("stats: paired samples of %d and %d rounds", len(base.D), len(other.D))
	}
	iv := Interval{Ratio: ratio(base.D, other.D), Level: level}
	const resamples = 4000
	rng := rand.New(rand.NewPCG(1, 2))
	rs := make([]float64, resamples)
	b, o := make([]time.Duration, n), make([]time.Duration, n)
	for r := range rs {
		for i := range n {
			k := rng.IntN(n)
			b[i], o[i] = base.D[k], other.D[k]
		}
		rs[r] = ratio(b, o)
	}
	slices.Sort(rs)
	tail := (1 - level) / 2
	iv.Lo = rs[int(tail*float64(resamples-1)+0.5)]
	iv.Hi = rs[int((1-tail)*float64(resamples-1)+0.5)]
	return iv, nil
}

// MustInterval is MedianRatioInterval at 95% for a bench: samples that
// are not paired end the bench (log.Fatal).
func MustInterval(base, other *Sample) Interval {
	iv, err := MedianRatioInterval(base, other, 0.95)
	if err != nil {
		log.Fatal(err)
	}
	return iv
}

// ratio is the ratio of medians as Table prints it.
func ratio(base, other []time.Duration) float64 {
	return float64((&Sample{D: other}).Median()) / float64((&Sample{D: base}).Median())
}

// Versus says where iv stands against a target ratio (at most target):
// "met" when the whole interval is at or below it, "missed" when the
// whole interval is above it, "undecided" when the interval holds it.
func (iv Interval) Versus(target float64) string {
	switch {
	case iv.Hi <= target:
		return "met"
	case iv.Lo > target:
		return "missed"
	}
	return "undecided"
}

// String prints the ratio and its interval.
func (iv Interval) String() string {
	return fmt.Sprintf("%.3f× (%.0f%% interval %.3f–%.3f×)", iv.Ratio, iv.Level*100, iv.Lo, iv.Hi)
}
