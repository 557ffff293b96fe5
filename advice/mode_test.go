package advice

import (
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// The advice speaks the mode in force. A pool of 50 at 100 ms, 10 clients
// then 200: saturated at 50. Followed literally, no mode's advice edits a
// variable that mode ignores: adaptive mode (a leftover LOOMGATE_WORKERS
// beside it) is told what its limit does and where it should stand; a dry
// run is told it is one, what its mode would have done, and what to
// enforce.
func TestAdviceSpeaksTheModeInForce(t *testing.T) {
	ms := time.Millisecond
	phases := []synthPhase{{20 * time.Second, []int{10}, nil}, {40 * time.Second, []int{200}, nil}}
	routes := []synthRoute{{path: "/wait", lo: 95 * ms, hi: 105 * ms, pool: 0}}
	tests := []struct {
		name     string
		settings Settings
		mode     limiter.Mode
		want     []string // in the text
		not      []string
	}{
		{name: "unbounded", settings: Settings{Mode: limiter.Unbounded, Workers: 20, QueueSize: 10000, QueueTimeout: 30 * time.Second},
			mode: limiter.Fixed,
			want: []string{"Mode unbounded, no bulkhead.", "LOOMGATE_MODE=fixed with LOOMGATE_WORKERS=50", "in force (MODE=unbounded, no bulkhead)"}},
		{name: "fixed at 200", settings: Settings{Mode: limiter.Fixed, Workers: 200, QueueSize: 10000, QueueTimeout: 30 * time.Second},
			mode: limiter.Fixed,
			want: []string{"Mode fixed, WORKERS=200", "LOOMGATE_WORKERS=50", "in force (MODE=fixed, WORKERS=200"}},
		{name: "adaptive, open, a leftover WORKERS=20", settings: Settings{Mode: limiter.Adaptive, Workers: 0, QueueSize: 10000, QueueTimeout: 30 * time.Second, AdaptiveMin: 1},
			mode: limiter.Adaptive,
			want: []string{"Mode adaptive, no limit yet", "Adaptive mode has admission open now", "Nothing to set", "in force (MODE=adaptive, admission open)"},
			not:  []string{"Keep LOOMGATE_WORKERS", "Cap admission at", "raise it to", "in force (MODE=fixed"}},
		{name: "adaptive, limited at 50", settings: Settings{Mode: limiter.Adaptive, Workers: 50, QueueSize: 10000, QueueTimeout: 30 * time.Second, AdaptiveMin: 1},
			mode: limiter.Adaptive,
			want: []string{"Mode adaptive, limit 50 now", "Nothing to set", "in force (MODE=adaptive, limit 50"},
			not:  []string{"Keep LOOMGATE_WORKERS", "Cap admission at", "raise it to", "in force (MODE=fixed"}},
		{name: "a dry run of fixed at 20", settings: Settings{Mode: limiter.Fixed, Workers: 20, QueueSize: 10000, QueueTimeout: 30 * time.Second, DryRun: true},
			mode: limiter.Fixed,
			want: []string{"Dry run of MODE=fixed, WORKERS=20", "A dry run of MODE=fixed, WORKERS=20", "set LOOMGATE_WORKERS=50", "Enforced, MODE=fixed, WORKERS=20", "dry run (MODE=fixed, WORKERS=20"},
			not:  []string{"Mode unbounded, no bulkhead."}},
		{name: "a dry run of fixed at 50", settings: Settings{Mode: limiter.Fixed, Workers: 50, QueueSize: 10000, QueueTimeout: 30 * time.Second, DryRun: true},
			mode: limiter.Fixed,
			want: []string{"A dry run of MODE=fixed, WORKERS=50", "To enforce MODE=fixed, WORKERS=50, QUEUE_SIZE=10000, QUEUE_TIMEOUT=30s, set LOOMGATE_DRY_RUN=false."},
			not:  []string{"Mode unbounded, no bulkhead.", "To enforce it"}},
		// Enforced, a dry run of adaptive mode is adaptive mode: its advice
		// is adaptive mode's, never a fixed limit to enforce by ending the
		// dry run.
		{name: "a dry run of adaptive, open", settings: Settings{Mode: limiter.Adaptive, QueueSize: 10000, QueueTimeout: 30 * time.Second, DryRun: true},
			mode: limiter.Adaptive,
			want: []string{"Dry run of MODE=adaptive", "A dry run of MODE=adaptive", "Adaptive mode has admission open now", "To enforce adaptive mode, set LOOMGATE_DRY_RUN=false: it sets and moves its limit itself, and queues the rest"},
			not:  []string{"Mode unbounded, no bulkhead.", "Cap admission at", "To enforce it"}},
		{name: "a dry run of adaptive at 50", settings: Settings{Mode: limiter.Adaptive, Workers: 50, QueueSize: 10000, QueueTimeout: 30 * time.Second, DryRun: true},
			mode: limiter.Adaptive,
			want: []string{"A dry run of MODE=adaptive, limit 50", "Adaptive mode holds its limit at 50", "To enforce adaptive mode, set LOOMGATE_DRY_RUN=false: it sets and moves its limit itself, 50 now"},
			not:  []string{"Cap admission at", "To enforce it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := synth{routes: routes, pools: []int{50}, phases: phases}
			snap := s.play(t)
			// The advice of the same figures under the settings named.
			snap.Settings = tt.settings
			snap.Recommendation = Advise(tt.settings, snap.Figures)
			text := snap.Text()
			t.Logf("%s", text)
			r := snap.Recommendation
			if r.Mode != tt.mode {
				t.Errorf("Mode = %v; want %v", r.Mode, tt.mode)
			}
			if tt.mode == limiter.Adaptive && (r.Workers != 0 || r.Bulkhead != 0 || r.Limit < 42 || r.Limit > 58) {
				t.Errorf("adaptive: Workers %d, Bulkhead %d, Limit %d; want no variable and a limit near 50", r.Workers, r.Bulkhead, r.Limit)
			}
			if r.Mode == limiter.Fixed && r.QueueSize != 10000 {
				t.Errorf("QueueSize = %d; want the 10000 the recommended setting has", r.QueueSize)
			}
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("the advice lacks %q:\n%s", w, text)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(text, w) {
					t.Errorf("the advice says %q:\n%s", w, text)
				}
			}
		})
	}
}

// Adaptive mode holding its limit at a pool of 37 in front of 300
// clients: the upstream, served 37 at once, is unstretched, but the
// service is saturated and loomgate holds the excess. The advice says
// that, not that the upstream is unsaturated with a capacity of at least
// the limit.
func TestAdaptiveHoldingTheExcess(t *testing.T) {
	ms := time.Millisecond
	held := Settings{Mode: limiter.Fixed, Workers: 37, QueueSize: 10000, QueueTimeout: 30 * time.Second}
	s := synth{routes: []synthRoute{{path: "/wait", lo: 78 * ms, hi: 82 * ms, pool: 0}}, pools: []int{37}, settings: held,
		phases: []synthPhase{{60 * time.Second, []int{300}, nil}}}
	snap := s.play(t)
	snap.Settings = Settings{Mode: limiter.Adaptive, Workers: 37, QueueSize: 10000, QueueTimeout: 30 * time.Second, AdaptiveMin: 1}
	snap.Recommendation = Advise(snap.Settings, snap.Figures)
	text := snap.Text()
	for _, w := range []string{"Demand exceeds what the upstream serves", "adaptive mode holds 37 at the upstream", "loomgate's queue", "Nothing to set"} {
		if !strings.Contains(text, w) {
			t.Errorf("the advice lacks %q:\n%s", w, text)
		}
	}
	for _, w := range []string{"The upstream is not saturated", "its capacity is at least that"} {
		if strings.Contains(text, w) {
			t.Errorf("the advice says %q:\n%s", w, text)
		}
	}
}

// TestDryRunIsNotToldToProbe: an upstream only ever seen at one load,
// whether it queues inside unknown. Outside a dry run the advice names the
// probe; in a dry run, which refuses LOOMGATE_PROBE=on at start (a probe
// caps admission, which a dry run never does), it names only a ramp.
func TestDryRunIsNotToldToProbe(t *testing.T) {
	ms := time.Millisecond
	s := synth{routes: []synthRoute{{path: "/wait", lo: 95 * ms, hi: 105 * ms, pool: 0}}, pools: []int{50},
		phases: []synthPhase{{30 * time.Second, []int{200}, nil}}}
	snap := s.play(t)
	for _, dry := range []bool{false, true} {
		// Every request admitted, as the figures were: unbounded with no
		// bulkhead, or a dry run of a fixed limit.
		settings := Settings{Mode: limiter.Unbounded}
		if dry {
			settings = Settings{Mode: limiter.Fixed, Workers: 20, QueueSize: 10000, QueueTimeout: 30 * time.Second, DryRun: true}
		}
		r := Advise(settings, snap.Figures)
		if r.verdict != unknownSaturation {
			t.Fatalf("dry run %v: verdict %v (%q); want saturation unknown", dry, r.verdict, r.Summary)
		}
		if probe := strings.Contains(r.Summary, "LOOMGATE_PROBE=on"); probe == dry || !strings.Contains(r.Summary, "let the load vary") {
			t.Errorf("dry run %v: %q; want LOOMGATE_PROBE=on named only outside a dry run, and the ramp in both", dry, r.Summary)
		}
	}
}
