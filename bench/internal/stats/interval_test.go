package stats

import (
	"math/rand/v2"
	"testing"
	"time"
)

func sample(ds ...time.Duration) *Sample { return &Sample{D: ds} }

func TestMedianRatioInterval(t *testing.T) {
	ms := time.Millisecond
	// Noisy rounds: a base around 100 ms and an other 2% slower in every
	// round, both moved by the same per-round drift (as interleaving
	// sees it).
	rng := rand.New(rand.NewPCG(3, 4))
	noisyBase, noisyOther := &Sample{}, &Sample{}
	for range 200 {
		drift := time.Duration(rng.IntN(20)) * ms
		noisyBase.Add(100*ms + drift + time.Duration(rng.IntN(2000))*time.Microsecond)
		noisyOther.Add(102*ms + drift + time.Duration(rng.IntN(2000))*time.Microsecond)
	}
	for _, tc := range []struct {
		name        string
		base, other *Sample
		target      float64
		lo, hi      float64 // the interval must lie within [lo, hi]
		versus      string
	}{
		{"equal", sample(10*ms, 10*ms, 10*ms), sample(10*ms, 10*ms, 10*ms), 1.03, 1, 1, "met"},
		{"scaled", sample(10*ms, 20*ms, 30*ms), sample(11*ms, 22*ms, 33*ms), 1.03, 1.1, 1.1, "missed"},
		{"noisy 2% slower", noisyBase, noisyOther, 1.03, 1.0, 1.04, "met"},
		{"noisy 2% slower, target 1.02", noisyBase, noisyOther, 1.02, 1.0, 1.04, "undecided"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv, err := MedianRatioInterval(tc.base, tc.other, 0.95)
			if err != nil {
				t.Fatal(err)
			}
			if iv.Lo > iv.Ratio || iv.Ratio > iv.Hi {
				t.Errorf("%v: ratio outside its interval", iv)
			}
			if iv.Lo < tc.lo-1e-9 || iv.Hi > tc.hi+1e-9 {
				t.Errorf("%v, want within %.3f–%.3f", iv, tc.lo, tc.hi)
			}
			if got := iv.Versus(tc.target); got != tc.versus {
				t.Errorf("%v versus %.3f: %s, want %s", iv, tc.target, got, tc.versus)
			}
		})
	}
	if _, err := MedianRatioInterval(sample(ms), sample(ms, ms), 0.95); err == nil {
		t.Error("samples of different lengths: no error")
	}
	if _, err := MedianRatioInterval(sample(), sample(), 0.95); err == nil {
		t.Error("empty samples: no error")
	}
}
