// Package hist is the histogram the advice's window keeps of queue waits
// and latencies, per route class and per priority level: fine bounds (9%
// apart), an index computed rather than searched, and quantiles read as
// Prometheus's histogram_quantile reads them.
package hist

import (
	"math"
	"time"
)

// Bounds are the histogram's bounds, in seconds: from
// 100µs to past 60s, each 2^(1/8) (about 9%) above the last. The classic
// buckets are too coarse for a status page: a steady 200 ms falls between
// 0.1 and 0.25 and would read as a p50 of 175 ms; here a quantile is off
// by at most one bucket, 9%.
var Bounds = func() [Buckets - 1]float64 {
	var b [Buckets - 1]float64
	for i := range b {
		b[i] = lowest * math.Exp2(float64(i)/steps)
	}
	return b
}()

const (
	lowest = 100e-6 // seconds
	steps  = 8      // bounds per doubling
	// Buckets covers 100µs to 60s (2^19.2 of range) in 1/8-doublings,
	// +Inf included.
	Buckets = 156
)

// Index is the bucket of d: the first whose upper
// bound is at least d, or the +Inf bucket. It computes the index rather
// than searching 155 bounds, then corrects the floating-point edge.
func Index(d time.Duration) int {
	s := d.Seconds()
	if s <= lowest {
		return 0
	}
	i := int(math.Ceil(math.Log2(s/lowest) * steps))
	if i >= len(Bounds) {
		return len(Bounds)
	}
	if i > 0 && s <= Bounds[i-1] {
		i--
	} else if s > Bounds[i] {
		i++
	}
	return i
}

// Quantile estimates the q-quantile from histogram bucket counts the way
// Prometheus's histogram_quantile does: find the bucket holding the
// rank and interpolate linearly inside it, the first bucket starting at 0;
// a rank in the +Inf bucket answers the highest finite bound. counts has
// one more entry than bounds (the +Inf bucket) and is not cumulative. It
// returns NaN when there are no observations.
func Quantile[C uint32 | uint64](q float64, bounds []float64, counts []C) float64 {
	var total uint64
	for _, c := range counts {
		total += uint64(c)
	}
	if total == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	rank := min(max(q, 0), 1) * float64(total)
	var below uint64 // observations in the buckets before i
	for i, c := range counts {
		// The first non-empty bucket that reaches the rank: a rank of 0
		// (q = 0) must not stop in an empty first bucket.
		if c == 0 || float64(below+uint64(c)) < rank {
			below += uint64(c)
			continue
		}
		if i == len(bounds) {
			return bounds[len(bounds)-1]
		}
		lower := 0.0
		if i > 0 {
			lower = bounds[i-1]
		}
		return lower + (bounds[i]-lower)*(rank-float64(below))/float64(c)
	}
	return bounds[len(bounds)-1] // not reached: the last non-empty bucket reaches any rank
}

// Duration converts a float number of seconds, a quantile's, to a
// Duration; NaN is 0.
func Duration(s float64) time.Duration {
	if math.IsNaN(s) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
