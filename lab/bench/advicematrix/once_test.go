package advicematrix

import (
	"testing"

	"github.com/loomgate/loomgate/lab/bench"
)

// TestOnce reads the applied sidecar's advice: kept, a bounded probe, a
// capacity estimated again a little apart, or a reversal.
func TestOnce(t *testing.T) {
	fixed50 := bench.Sidecar{Mode: "fixed", Workers: 50}
	unbounded := bench.Sidecar{Mode: "unbounded"}
	advice := func(mode string, workers, bulkhead, probe int) adviceDoc {
		var d adviceDoc
		d.Recommendation.Mode, d.Recommendation.Workers, d.Recommendation.Bulkhead, d.Recommendation.Probe = mode, workers, bulkhead, probe
		d.Recommendation.Predictions = []predictionDoc{{Name: "in force"}}
		return d
	}
	tests := []struct {
		name     string
		applied  bench.Sidecar
		doc      adviceDoc
		said     string
		reversal bool
	}{
		{"kept", fixed50, advice("fixed", 50, 50, 0), "keeps", false},
		{"probe of 25%", fixed50, advice("fixed", 50, 0, 63), "keeps, or probe 63", false},
		{"probe of 25%, rounded", bench.Sidecar{Mode: "fixed", Workers: 204}, advice("fixed", 204, 0, 260), "keeps, or probe 260", false},
		{"probe fourfold", fixed50, advice("fixed", 50, 0, 200), "probe 200, more than a step above 50", true},
		{"estimated again, 10% lower", fixed50, advice("fixed", 45, 45, 0), "keeps (45)", false},
		{"cap lowered by half", fixed50, advice("fixed", 25, 25, 0), "WORKERS=25", true},
		{"cap dropped", fixed50, advice("unbounded", 0, 0, 0), "no limit", true},
		{"unbounded kept", unbounded, advice("unbounded", 0, 0, 0), "keeps", false},
		{"unbounded, now capped", unbounded, advice("fixed", 30, 30, 0), "WORKERS=30", true},
		{"no advice", fixed50, adviceDoc{}, "no advice", false},
	}
	for _, tt := range tests {
		said, reversal := once(tt.applied, tt.doc)
		if said != tt.said || reversal != tt.reversal {
			t.Errorf("%s: once = %q, %v; want %q, %v", tt.name, said, reversal, tt.said, tt.reversal)
		}
	}
}

// TestJudgeHealthyDemand: a healthy upstream capped below its demand is a
// problem, whether the demand is closed clients or open arrivals, which
// are counted by what they held.
func TestJudgeHealthyDemand(t *testing.T) {
	closed := Phase{Flows: []bench.Flow{{Path: "/wait", Clients: 40}}}
	open := Phase{Rates: []Rate{{Path: "/wait", PerSecond: 240}}}
	tests := []struct {
		name    string
		last    Phase
		workers int
		held    float64
		problem bool
	}{
		{"closed, capped below its clients", closed, 30, 40, true},
		{"closed, capped above its clients", closed, 50, 40, false},
		{"open, capped below what it held", open, 20, 24.6, true},
		{"open, capped at what it held", open, 24, 24.6, false},
		{"open, no cap", open, 0, 24.6, false},
	}
	for _, tt := range tests {
		r := Result{Workers: tt.workers, InFlight: tt.held}
		r.judge([]Phase{tt.last})
		if got := len(r.Problems) > 0; got != tt.problem {
			t.Errorf("%s: problems %q; want a problem: %v", tt.name, r.Problems, tt.problem)
		}
	}
}

// TestJudgeUnknownAndProbes: where one load cannot tell, the verdict must
// be unknown, with no lower bound above the truth and no limit; elsewhere
// unknown is a problem; and a probe where a calmer load was seen is one.
func TestJudgeUnknownAndProbes(t *testing.T) {
	peak := []Phase{{Flows: []bench.Flow{{Path: "/wait", Clients: 300}}}}
	rising := []Phase{{Flows: []bench.Flow{{Path: "/wait", Clients: 10}}}, {Flows: []bench.Flow{{Path: "/wait", Clients: 200}}}}
	unknown := Truth{Unknown: true, Capacity: 37}
	tests := []struct {
		name    string
		truth   Truth
		phases  []Phase
		r       Result
		problem bool
	}{
		{"unknown, said so", unknown, peak, Result{SaturationUnknown: "unknown: never seen at a calmer load"}, false},
		{"unknown, said not saturated", unknown, peak, Result{}, true},
		{"unknown, a lower bound above the pool", unknown, peak, Result{SaturationUnknown: "unknown", LowerBound: 300}, true},
		{"unknown, a limit", unknown, peak, Result{SaturationUnknown: "unknown", Workers: 37}, true},
		{"saturated, said unknown", Truth{Saturated: true}, peak, Result{SaturationUnknown: "unknown", Probes: 1}, true},
		{"saturated, found by a probe", Truth{Saturated: true}, peak, Result{Saturated: true, Probes: 1, Workers: 37}, false},
		{"a probe though a calmer load was seen", Truth{Saturated: true}, rising, Result{Saturated: true, Probes: 1, Workers: 50}, true},
	}
	for _, tt := range tests {
		r := tt.r
		r.Truth = tt.truth
		r.judge(tt.phases)
		if got := len(r.Problems) > 0; got != tt.problem {
			t.Errorf("%s: problems %q; want a problem: %v", tt.name, r.Problems, tt.problem)
		}
	}
}
