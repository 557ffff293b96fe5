package advice

import (
	"math"
	"testing"
	"time"
)

// A calm phase shorter than a bucket, then an overload: the bucket that
// mixes the calm seconds with the start of the overload must not make the
// baseline. Its mean service time has the first queued answers in it, and
// a capacity counted in that mean came out at 108 for a pool of 50.
func TestBaselineNotFromMixedBucket(t *testing.T) {
	ms := time.Millisecond
	pool50 := []synthRoute{{path: "/wait", lo: 95 * ms, hi: 105 * ms, pool: 0}}
	tests := []struct {
		name   string
		phases []synthPhase
		// known: the capacity must be found; otherwise unknown is right
		// too, never a wrong number.
		known bool
	}{
		{"4 s at 10 clients, then 12 s at 200", []synthPhase{{4 * time.Second, []int{10}, nil}, {12 * time.Second, []int{200}, nil}}, true},
		{"2 s at 10 clients, then 30 s at 200", []synthPhase{{2 * time.Second, []int{10}, nil}, {30 * time.Second, []int{200}, nil}}, true},
		{"1 s at 10 clients, then 30 s at 200", []synthPhase{{time.Second, []int{10}, nil}, {30 * time.Second, []int{200}, nil}}, false},
		{"3 s at 10 clients, then 30 s at 200", []synthPhase{{3 * time.Second, []int{10}, nil}, {30 * time.Second, []int{200}, nil}}, true},
		{"7 s at 10 clients, then 20 s at 200", []synthPhase{{7 * time.Second, []int{10}, nil}, {20 * time.Second, []int{200}, nil}}, true},
		// The mixed bucket has left the live window: its calm part is
		// kept without its histogram.
		{"4 s at 10 clients, then 90 s at 200", []synthPhase{{4 * time.Second, []int{10}, nil}, {90 * time.Second, []int{200}, nil}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := synth{routes: pool50, pools: []int{50}, phases: tt.phases}.play(t)
			e := snap.Figures.Estimate
			switch {
			case math.IsNaN(e.Capacity):
				if tt.known {
					t.Errorf("Capacity unknown (%q); want 50 within 15%%", e.Unknown)
				}
			case math.Abs(e.Capacity-50) > 0.15*50:
				t.Errorf("Capacity = %.1f (%.1f to %.1f); want 50 within 15%%, or unknown", e.Capacity, e.CapacityLow, e.CapacityHigh)
			case !e.Saturated:
				t.Errorf("Saturated = false with capacity %.1f; want saturated", e.Capacity)
			}
			t.Logf("saturated %v, capacity %.1f (%q), at least %.1f", e.Saturated, e.Capacity, e.Unknown, e.LowerBound)
			if e.LowerBound > 50 || e.Seen > 55 {
				t.Errorf("LowerBound = %.1f, Seen = %.1f; want at most the pool of 50", e.LowerBound, e.Seen)
			}
		})
	}
}

// The same change of load in front of a healthy upstream: the calm seconds
// are a fair share of the bucket's answers, not its quickest, and nothing
// is saturated.
func TestBaselineMixedBucketHealthy(t *testing.T) {
	ms := time.Millisecond
	for _, calm := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		snap := synth{
			routes: []synthRoute{{path: "/wait", lo: 20 * ms, hi: 400 * ms, pool: -1}},
			phases: []synthPhase{{calm, []int{10}, nil}, {30 * time.Second, []int{200}, nil}},
		}.play(t)
		e := snap.Figures.Estimate
		if e.Saturated || !math.IsNaN(e.Capacity) {
			t.Errorf("%v calm: saturated %v, capacity %.1f; want not saturated, capacity unknown", calm, e.Saturated, e.Capacity)
		}
		if e.LowerBound < 150 {
			t.Errorf("%v calm: LowerBound = %.1f; want about the 200 served without slowing", calm, e.LowerBound)
		}
	}
}

// Traffic in bursts, idle seconds between them: an idle second is no calm
// part, and the buckets still make the baseline.
func TestBaselineIdleSeconds(t *testing.T) {
	ms := time.Millisecond
	snap := synth{
		routes: []synthRoute{{path: "/wait", lo: 290 * ms, hi: 310 * ms, pool: -1, think: 2700 * ms}},
		phases: []synthPhase{{60 * time.Second, []int{30}, nil}},
	}.play(t)
	if len(snap.Figures.Routes) == 0 {
		t.Fatalf("no route answered: %s", snap.Text())
	}
	for _, rt := range snap.Figures.Routes {
		if rt.BaselineP25 == 0 {
			t.Errorf("%s: no baseline from bursts with idle seconds between them", rt.Name)
		}
	}
}

// Bursts over a steady trickle: the seconds between them are calmer, but
// the load did not change within the buckets, it fluctuated in each.
func TestBaselineBursts(t *testing.T) {
	ms := time.Millisecond
	snap := synth{
		routes: []synthRoute{
			{path: "/wait", lo: 290 * ms, hi: 310 * ms, pool: -1, think: 2700 * ms},
			{path: "/tick", lo: 95 * ms, hi: 105 * ms, pool: -1, think: 900 * ms},
		},
		phases: []synthPhase{{60 * time.Second, []int{30, 10}, nil}},
	}.play(t)
	for _, rt := range snap.Figures.Routes {
		if rt.BaselineP25 == 0 {
			t.Errorf("%s: no baseline from bursts over a trickle", rt.Name)
		}
	}
}
