package hist

import (
	"math"
	"testing"
	"time"
)

// TestIndexIsTheFirstBoundAtOrAbove: the computed index agrees with a
// search of the bounds, at the bounds themselves, just past them, and
// beyond the last.
func TestIndexIsTheFirstBoundAtOrAbove(t *testing.T) {
	search := func(d time.Duration) int {
		for i, b := range Bounds {
			if d.Seconds() <= b {
				return i
			}
		}
		return len(Bounds)
	}
	var ds []time.Duration
	for _, b := range Bounds {
		at := time.Duration(b * float64(time.Second))
		ds = append(ds, at-1, at, at+1)
	}
	ds = append(ds, 0, time.Microsecond, 100*time.Microsecond, time.Hour)
	for _, d := range ds {
		if got, want := Index(d), search(d); got != want {
			t.Errorf("Index(%v) = %d; the first bound at or above it is %d", d, got, want)
		}
	}
}

// TestQuantileInterpolatesInItsBucket, worked by hand: bounds 1, 2, 4 and
// counts 10, 10, 20, +Inf 0. The median, rank 20, is the end of the second
// bucket: 2. The 0.75 quantile, rank 30, is halfway through the third
// (20 to 40 of its 20): 3. A rank in the +Inf bucket answers the last
// bound; no observations answer NaN.
func TestQuantileInterpolatesInItsBucket(t *testing.T) {
	bounds := []float64{1, 2, 4}
	counts := []uint32{10, 10, 20, 0}
	for q, want := range map[float64]float64{0.5: 2, 0.75: 3, 0.25: 1, 0.05: 0.2} {
		if got := Quantile(q, bounds, counts); math.Abs(got-want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v; want %v", q, got, want)
		}
	}
	if got := Quantile(0.99, bounds, []uint32{0, 0, 0, 5}); got != 4 {
		t.Errorf("Quantile in +Inf = %v; want the last bound, 4", got)
	}
	if got := Quantile(0.5, bounds, []uint64{0, 0, 0, 0}); !math.IsNaN(got) {
		t.Errorf("Quantile of nothing = %v; want NaN", got)
	}
}
