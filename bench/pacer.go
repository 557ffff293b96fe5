package bench

import (
	"math"
	"time"
)

// pacer is a constant arrival rate: request i is due at start + i / rate,
// whatever became of the requests before it.
//
// Each due time is computed from i, never by adding an interval to the
// previous one, so rounding cannot accumulate: at 3 rps request 3 is due at
// exactly one second.
type pacer struct {
	start time.Time
	rate  float64 // requests per second, > 0
}

// offset is when request i is due, relative to start, to the nanosecond.
func (p pacer) offset(i int64) time.Duration {
	return time.Duration(math.Round(float64(i) * float64(time.Second) / p.rate))
}

// due is when request i is due.
func (p pacer) due(i int64) time.Time { return p.start.Add(p.offset(i)) }

// first is the index of the first request due at or after start + d.
func (p pacer) first(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	// Rounding in offset can put the request at the boundary on either
	// side of it; step from the estimate to the exact answer.
	i := int64(math.Ceil(d.Seconds() * p.rate))
	for i > 0 && p.offset(i-1) >= d {
		i--
	}
	for p.offset(i) < d {
		i++
	}
	return i
}

// between is how many requests are due in [start+from, start+to).
func (p pacer) between(from, to time.Duration) int64 {
	return max(p.first(to)-p.first(from), 0)
}
