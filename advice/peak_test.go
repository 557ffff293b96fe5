package advice

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// A service first seen at its peak: every second of the window at the
// same load, its service time whatever that load makes it. A hidden pool
// of 37 at 80 ms holding 300 clients answers in 650 ms, and so does a
// dependency that takes 650 ms with no pool at all: at one load the two
// look the same, and the advice must say it cannot tell, not that the
// first is healthy.
func TestNeverSeenCalm(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		s     synth
		truth float64 // the capacity, 0 for none
	}{
		{name: "a pool of 37 at 80 ms, 300 clients", truth: 37, s: synth{
			routes: []synthRoute{{path: "/wait", lo: 78 * ms, hi: 82 * ms, pool: 0}}, pools: []int{37},
			phases: []synthPhase{{75 * time.Second, []int{300}, nil}}}},
		{name: "no pool, 650 ms, 300 clients", s: synth{
			routes: []synthRoute{{path: "/wait", lo: 640 * ms, hi: 660 * ms, pool: -1}},
			phases: []synthPhase{{75 * time.Second, []int{300}, nil}}}},
		{name: "a pool of 37 behind spread times, 300 clients", truth: 37, s: synth{
			routes: []synthRoute{{path: "/wait", lo: 20 * ms, hi: 140 * ms, pool: 0}}, pools: []int{37},
			phases: []synthPhase{{75 * time.Second, []int{300}, nil}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := tt.s.play(t)
			e, r := snap.Figures.Estimate, snap.Recommendation
			text := snap.Text()
			if e.SaturationUnknown == "" {
				t.Errorf("saturated %v, with no doubt; want unknown (%+v)", e.Saturated, e)
			}
			if tt.truth > 0 && e.LowerBound > tt.truth {
				t.Errorf("LowerBound = %.0f; above the capacity %.0f", e.LowerBound, tt.truth)
			}
			if isKnown(e.Capacity) {
				t.Errorf("Capacity = %.1f; want unknown", e.Capacity)
			}
			if r.Workers != 0 || r.Bulkhead != 0 || r.Mode != limiter.Unbounded {
				t.Errorf("recommends mode %s, Workers %d, Bulkhead %d; want the settings in force kept", r.Mode, r.Workers, r.Bulkhead)
			}
			for _, wrong := range []string{"not saturated", "keep the simpler one", "at least 300"} {
				if strings.Contains(text, wrong) {
					t.Errorf("the advice says %q:\n%s", wrong, text)
				}
			}
			if !strings.Contains(r.Summary, "LOOMGATE_PROBE=on") {
				t.Errorf("summary %q; want it to say how to find out", r.Summary)
			}
		})
	}
}

// A fixed limit of 20 holds 80 clients back from an upstream with no pool
// and 100 ms requests: what admitting them all would do was never seen.
// The prediction gives the range from what was seen (the 20 served at
// once, about 200 a second) to the upstream serving all 80 as fast (about
// 800), not the figures in force repeated as a forecast.
func TestPredictionBeyondSeenIsARange(t *testing.T) {
	ms := time.Millisecond
	s := synth{
		routes:   []synthRoute{{path: "/wait", lo: 98 * ms, hi: 102 * ms, pool: -1}},
		settings: Settings{Mode: limiter.Fixed, Workers: 20, QueueSize: 10000, QueueTimeout: 30 * time.Second},
		phases:   []synthPhase{{60 * time.Second, []int{80}, nil}},
	}
	snap := s.play(t)
	var unbounded *Prediction
	for i, p := range snap.Recommendation.Predictions {
		if !p.Fixed && p.Limit == 0 {
			unbounded = &snap.Recommendation.Predictions[i]
		}
	}
	if unbounded == nil {
		t.Fatalf("no prediction for unbounded admission:\n%s", snap.Text())
	}
	// The two ends, by Little's law: 20 / 0.1 s and 80 / 0.1 s.
	if !unbounded.Beyond || unbounded.Other == nil {
		t.Fatalf("unbounded: %+v; want a range, beyond what was seen\n%s", unbounded, snap.Text())
	}
	if lo, hi := unbounded.Throughput, unbounded.Other.Throughput; math.Abs(lo-200) > 30 || math.Abs(hi-800) > 80 {
		t.Errorf("unbounded: %.0f to %.0f rps; want about 200 to 800\n%s", lo, hi, snap.Text())
	}
	if p50 := unbounded.Other.P50; p50 < 90*ms || p50 > 115*ms {
		t.Errorf("unbounded at the speed seen: p50 %s; want about 100 ms", p50)
	}
	if text := snap.Text(); !strings.Contains(text, "It lies between") {
		t.Errorf("the text gives no range:\n%s", text)
	}
}
