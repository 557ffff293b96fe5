package advice

import (
	"strings"
	"testing"
	"time"
)

// A transition is not a calmer load. Read just after a peak ends, or
// between the bursts of a load that comes and goes, the seconds in which
// fewer requests are held are those admitted at the peak still draining:
// their service times are the peak's, and held beside a lower load they
// would read as an upstream that does not slow down. The advice must not
// say the upstream is unsaturated, nor a lower bound above its capacity.
func TestTransitionIsNotCalm(t *testing.T) {
	ms := time.Millisecond
	s := time.Second
	bursts := func(on, off time.Duration, clients int, total time.Duration) []synthPhase {
		var ps []synthPhase
		for d := time.Duration(0); d < total; d += on + off {
			ps = append(ps, synthPhase{on, []int{clients}, nil}, synthPhase{off, []int{0}, nil})
		}
		return ps
	}
	tests := []struct {
		name  string
		s     synth
		truth float64
	}{
		{name: "the end of a peak: a pool of 37 at 80 ms, 300 clients, then none", truth: 37, s: synth{
			routes: []synthRoute{{path: "/wait", lo: 78 * ms, hi: 82 * ms, pool: 0}}, pools: []int{37},
			phases: []synthPhase{{45 * s, []int{300}, nil}, {3 * s, []int{0}, nil}}}},
		{name: "the end of a peak, read 7 s after", truth: 37, s: synth{
			routes: []synthRoute{{path: "/wait", lo: 78 * ms, hi: 82 * ms, pool: 0}}, pools: []int{37},
			phases: []synthPhase{{45 * s, []int{300}, nil}, {7 * s, []int{0}, nil}}}},
		{name: "bursts of 200 clients, 5 s on and 5 s off, at a pool of 40 at 100 ms", truth: 40, s: synth{
			routes: []synthRoute{{path: "/wait", lo: 98 * ms, hi: 102 * ms, pool: 0}}, pools: []int{40},
			phases: bursts(5*s, 5*s, 200, 60*s)}},
		{name: "bursts of 200 clients, 3 s on and 2 s off, at a pool of 40 at 100 ms", truth: 40, s: synth{
			routes: []synthRoute{{path: "/wait", lo: 98 * ms, hi: 102 * ms, pool: 0}}, pools: []int{40},
			phases: bursts(3*s, 2*s, 200, 60*s)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := tt.s.play(t)
			e := snap.Figures.Estimate
			text := snap.Text()
			t.Logf("saturated %v (%s), capacity %.1f, lower bound %.0f", e.Saturated, e.SaturationUnknown, e.Capacity, e.LowerBound)
			if strings.Contains(e.SaturationUnknown, "no traffic") {
				t.Errorf("SaturationUnknown %q; there was traffic", e.SaturationUnknown)
			}
			if !e.Saturated && e.SaturationUnknown == "" {
				t.Errorf("upstream not saturated, with no doubt; want saturated or unknown (%+v)\n%s", e, text)
			}
			if e.LowerBound > 1.15*tt.truth {
				t.Errorf("LowerBound = %.0f; above the capacity %.0f\n%s", e.LowerBound, tt.truth, text)
			}
			if e.Saturated && isKnown(e.Capacity) && (e.Capacity < 0.85*tt.truth || e.Capacity > 1.15*tt.truth) {
				t.Errorf("Capacity = %.1f; want %.0f within 15%%, or unknown", e.Capacity, tt.truth)
			}
			for _, wrong := range []string{"not saturated", "keep the simpler one"} {
				if strings.Contains(text, wrong) {
					t.Errorf("the advice says %q:\n%s", wrong, text)
				}
			}
		})
	}
}

// A capacity is the one that holds now. A pool of 60 shrunk to 20 under
// the same 200 clients: 40 s after, the capacity said is the new pool's
// within 15%, not a median of fifteen minutes that remembers the old one.
// Read after the load has gone for a minute, it is said with its age.
func TestCapacityFollowsAShrunkPool(t *testing.T) {
	ms := time.Millisecond
	s := time.Second
	play := func(phases []synthPhase) Snapshot {
		return synth{
			routes: []synthRoute{{path: "/wait", lo: 98 * ms, hi: 102 * ms, pool: 0}}, pools: []int{60},
			phases: phases, resize: map[int][]int{2: {20}},
		}.play(t)
	}
	lead := synthPhase{20 * s, []int{10}, nil}
	snap := play([]synthPhase{lead, {60 * s, []int{200}, nil}, {40 * s, []int{200}, nil}})
	e := snap.Figures.Estimate
	if !e.Saturated || !isKnown(e.Capacity) || e.Capacity < 0.85*20 || e.Capacity > 1.15*20 {
		t.Fatalf("40 s after the pool of 60 shrank to 20: saturated %v, capacity %.1f; want saturated, 20 within 15%%\n%s", e.Saturated, e.Capacity, snap.Text())
	}
	if e.CapacityAge != 0 {
		t.Errorf("CapacityAge = %s while it queues; want 0", e.CapacityAge)
	}
	snap = play([]synthPhase{lead, {60 * s, []int{200}, nil}, {40 * s, []int{200}, nil}, {40 * s, []int{10}, nil}})
	e = snap.Figures.Estimate
	if isKnown(e.Capacity) && (e.CapacityAge < 30*s || !strings.Contains(snap.Text(), "ago")) {
		t.Errorf("40 s after the load fell: capacity %.1f, age %s; want it said with its age\n%s", e.Capacity, e.CapacityAge, snap.Text())
	}
}

// A healthy upstream whose dependency slows under the same 40 clients,
// after a calmer spell at 18 (as a probe's step below the knee leaves one):
// against that spell, the 40 read as a load risen and the slower service
// as a queue inside, a pool of about 20. But 40 were served in their
// unloaded time before: the load is not what stretches it now.
func TestSlowerDependencyAfterACalmSpell(t *testing.T) {
	ms := time.Millisecond
	s := time.Second
	snap := synth{
		routes: []synthRoute{{path: "/wait", lo: 48 * ms, hi: 52 * ms, pool: -1}, {path: "/wait", lo: 98 * ms, hi: 102 * ms, pool: -1}},
		phases: []synthPhase{
			{15 * s, []int{40, 0}, nil},
			{10 * s, []int{18, 0}, nil},
			{30 * s, []int{0, 40}, nil},
		},
	}.play(t)
	e := snap.Figures.Estimate
	if e.Saturated {
		t.Errorf("saturated, capacity %.1f; want a slower dependency, not saturation\n%s", e.Capacity, snap.Text())
	}
	if isKnown(e.Capacity) {
		t.Errorf("Capacity = %.1f; want none stated for a healthy upstream", e.Capacity)
	}
}
