package advice

import (
	"github.com/loomgate/loomgate/limiter"

	"math"
	"strings"
	"testing"
	"time"
)

// Advice that is followed must stand: the sidecar that applies it sees a
// window in which the cap keeps the upstream at what it serves unloaded
// while loomgate's queue holds the rest, and learns from it only that the
// capacity is at least the cap. Its advice keeps the setting or asks for a
// bounded step up, watched; it never says to raise the cap fourfold or to
// switch to admitting everything, and it predicts no throughput that was
// never seen.
func TestAdviceStandsOnceFollowed(t *testing.T) {
	ms := time.Millisecond
	pool50 := []synthRoute{{path: "/wait", lo: 95 * ms, hi: 105 * ms}}
	tomcat := []synthRoute{
		{path: "/sleep.jsp", lo: 98 * ms, hi: 102 * ms, think: 500 * time.Microsecond},
		{path: "/trivial.jsp", lo: 150 * time.Microsecond, hi: 250 * time.Microsecond, think: 3 * ms},
	}
	twoCosts := []synthRoute{{path: "/a", lo: 19 * ms, hi: 21 * ms}, {path: "/b", lo: 190 * ms, hi: 210 * ms}}
	tests := []struct {
		name  string
		first synth // as a new user runs it, unbounded
		// applied is the load the applied setting then meets: the first
		// run's last phase unless set.
		applied []synthPhase
		// workers overrides the first run's advice, when the test is of
		// one applied setting.
		workers int
	}{
		{name: "pool of 50, 10 then 200 clients", first: synth{routes: pool50, pools: []int{50},
			phases: []synthPhase{{20 * time.Second, []int{10}, nil}, {60 * time.Second, []int{200}, nil}}}},
		{name: "pool of 50, applied under rising load", first: synth{routes: pool50, pools: []int{50},
			phases: []synthPhase{{20 * time.Second, []int{10}, nil}, {60 * time.Second, []int{200}, nil}}},
			applied: []synthPhase{{20 * time.Second, []int{10}, nil}, {20 * time.Second, []int{50}, nil}, {40 * time.Second, []int{200}, nil}}},
		{name: "a servlet pool of 50 behind two pages", first: synth{routes: tomcat, pools: []int{50},
			phases: []synthPhase{{60 * time.Second, []int{20, 20}, nil}, {40 * time.Second, []int{100, 20}, nil}}}},
		{name: "a servlet pool of 50 behind two pages, WORKERS=51", workers: 51, first: synth{routes: tomcat, pools: []int{50},
			phases: []synthPhase{{60 * time.Second, []int{20, 20}, nil}, {40 * time.Second, []int{100, 20}, nil}}}},
		{name: "20 ms and 200 ms behind one pool of 30", first: synth{routes: twoCosts, pools: []int{30},
			phases: []synthPhase{{30 * time.Second, []int{10, 10}, nil}, {60 * time.Second, []int{60, 60}, nil}}}},
		{name: "healthy, 10 then 100 clients", first: synth{routes: []synthRoute{{path: "/wait", lo: 20 * ms, hi: 400 * ms, pool: -1}},
			phases: []synthPhase{{20 * time.Second, []int{10}, nil}, {60 * time.Second, []int{100}, nil}}}},
		{name: "a pool of 10 behind /db only", first: synth{
			routes: []synthRoute{{path: "/db", lo: 190 * ms, hi: 210 * ms, pool: 0}, {path: "/wait", lo: 95 * ms, hi: 105 * ms, pool: -1}},
			pools:  []int{10}, phases: []synthPhase{{30 * time.Second, []int{5, 10}, nil}, {60 * time.Second, []int{50, 10}, nil}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := tt.first.play(t).Recommendation
			workers := first.Workers
			if tt.workers > 0 {
				workers = tt.workers
			}
			applied := tt.first
			applied.phases = tt.applied
			if applied.phases == nil {
				last := tt.first.phases[len(tt.first.phases)-1]
				applied.phases = []synthPhase{{60 * time.Second, last.clients, last.rates}}
			}
			if workers > 0 {
				applied.settings = Settings{Mode: limiter.Fixed, Workers: workers, QueueSize: 10000, QueueTimeout: 30 * time.Second}
			}
			snap := applied.play(t)
			r, f := snap.Recommendation, snap.Figures
			t.Logf("first: %s\napplied %s: %s\n%s", first.Summary, applied.settings.inForce().Describe(), r.Summary, snap.Text())
			if workers == 0 {
				if r.Workers != 0 || r.Bulkhead != 0 {
					t.Errorf("no cap was advised, and once applied the advice is Workers=%d, Bulkhead=%d", r.Workers, r.Bulkhead)
				}
			} else {
				if r.Mode != limiter.Fixed || r.Workers > workers {
					t.Errorf("WORKERS=%d applied; the advice is now mode %s, Workers=%d; want it kept, or lower", workers, r.Mode, r.Workers)
				}
				if most := readableUp(1.25 * float64(workers)); r.Probe > most {
					t.Errorf("Probe = %d; want a bounded step, at most %d", r.Probe, most)
				}
				if strings.Contains(r.Summary, "switch to LOOMGATE_MODE=unbounded") || strings.Contains(r.Summary, "set it to 0") {
					t.Errorf("the advice would admit everything: %s", r.Summary)
				}
			}
			// What the setting in force would do is what it did.
			if p := r.Predictions[0]; math.Abs(p.Throughput-f.Throughput) > 0.15*f.Throughput ||
				math.Abs(float64(p.P50-f.LatencyP50)) > 0.25*float64(f.LatencyP50) {
				t.Errorf("prediction in force: %.0f rps, p50 %s; measured %.0f rps, p50 %s", p.Throughput, p.P50, f.Throughput, f.LatencyP50)
			}
			for _, p := range r.Predictions {
				if p.Throughput > 1.15*f.Throughput {
					t.Errorf("prediction %s (%s): %.0f rps; the upstream was seen serving %.0f", p.Name, p.Setting.Describe(), p.Throughput, f.Throughput)
				}
			}
		})
	}
}
