package memory

import (
	"math"
	"testing"
	"time"
)

func TestLeastSquares(t *testing.T) {
	tests := []struct {
		name   string
		xs, ys []float64
		a, b   float64
		ok     bool
	}{
		{"exact line", []float64{50, 100, 150}, []float64{1000 + 50*512, 1000 + 100*512, 1000 + 150*512}, 1000, 512, true},
		{"noise around a line", []float64{0, 1, 2, 3}, []float64{1, 2, 5, 6}, 0.8, 1.8, true},
		// Large x that varies little: the centred sums keep the digits.
		{"large x", []float64{1e9, 1e9 + 1, 1e9 + 2}, []float64{3, 5, 7}, 3 - 2e9, 2, true},
		{"x does not vary", []float64{5, 5, 5}, []float64{1, 2, 3}, 0, 0, false},
		{"one point", []float64{5}, []float64{1}, 0, 0, false},
	}
	for _, tt := range tests {
		a, b, ok := leastSquares(tt.xs, tt.ys)
		if ok != tt.ok || ok && (!near(a, tt.a) || !near(b, tt.b)) {
			t.Errorf("%s: leastSquares = %v, %v, %v; want %v, %v, %v", tt.name, a, b, ok, tt.a, tt.b, tt.ok)
		}
	}
}

// readings plays a load into f: for each level, n memory readings one
// second apart, each after four samples of that many requests in flight,
// the memory being memory(level) at each reading. It returns the time
// after the last reading.
func readings(f *Fit, at time.Time, n int, memory func(float64) float64, levels ...int64) time.Time {
	for _, level := range levels {
		for range n {
			for range 4 {
				at = at.Add(250 * time.Millisecond)
				f.Sample(level)
			}
			f.Reading(at, memory(float64(level)))
		}
	}
	return at
}

func TestMemoryFit(t *testing.T) {
	linear := func(x float64) float64 { return 200<<20 + 512<<10*x }
	tests := []struct {
		name   string
		levels []int64
		memory func(float64) float64
		want   float64
	}{
		{"50 then 150 in flight at 512 KiB each", []int64{50, 150}, linear, 512 << 10},
		{"steady load: nothing to fit", []int64{100, 100}, linear, 0},
		{"varies by one request only", []int64{3, 4}, linear, 0},
		{"memory falls as load rises: no slope", []int64{50, 150}, func(x float64) float64 { return 1e9 - 1e6*x }, 0},
		{"idle readings are left out", []int64{0, 50, 150, 0}, func(x float64) float64 {
			if x == 0 {
				return 1e12 // a heap kept after the burst
			}
			return linear(x)
		}, 512 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFit(time.Minute)
			readings(f, t0, 3, tt.memory, tt.levels...)
			if _, perRequest := f.Figures(); !near(perRequest, tt.want) {
				t.Errorf("bytes per request = %v; want %v", perRequest, tt.want)
			}
		})
	}
}

func TestMemoryFitPersistsAndAges(t *testing.T) {
	f := NewFit(time.Minute)
	at := readings(f, t0, 3, func(x float64) float64 { return 1e8 + 1e6*x }, 10, 30)
	// A steady stretch longer than the window: the points of the varied
	// stretch age out, and nothing new can be fitted, but what was
	// measured stands.
	at = readings(f, at, 90, func(x float64) float64 { return 1e8 + 1e6*x }, 30)
	if last, perRequest := f.Figures(); !near(perRequest, 1e6) || last != 1e8+30e6 {
		t.Errorf("after a steady stretch: bytes per request, last reading = %v, %v; want the earlier 1e6 and the last reading 1.3e8",
			perRequest, last)
	}
	if n := len(f.points); n > int(time.Minute/time.Second)+1 {
		t.Errorf("%d readings kept; want at most a window's, one a second", n)
	}
	// A new varied stretch with another slope replaces it.
	readings(f, at, 3, func(x float64) float64 { return 1e8 + 2e6*x }, 10, 50)
	if _, perRequest := f.Figures(); perRequest < 1.5e6 {
		t.Errorf("after a new varied stretch bytes per request = %v; want it near the new 2e6", perRequest)
	}
}

// t0 is the tests' epoch.
var t0 = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
