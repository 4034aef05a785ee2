package fsguard

import "fmt"

// Human formats u's size for people: KiB below one MiB, else MiB with one
// decimal, "more than" when the walk was truncated.
func (u Usage) Human() string {
	s := fmt.Sprintf("%.1f MiB", float64(u.Bytes)/(1<<20))
	if u.Bytes < 1<<20 {
		s = fmt.Sprintf("%d KiB", u.Bytes>>10)
	}
	if u.Truncated {
		s = "more than " + s
	}
	return s
}
