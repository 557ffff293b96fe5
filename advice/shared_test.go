package advice

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// Routes of different cost behind one pool (a JDBC pool every endpoint
// uses, a servlet container's threads) stretch together as the total load
// rises, whatever each one's own load: the upstream is saturated, and its
// capacity counts each route in its unloaded service time. A pool behind
// one route stretches that route alone, with its own load; the others stay
// flat, and no global cap is right.
func TestSharedBottleneck(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name       string
		s          synth
		saturated  bool
		capacity   float64 // NaN: unknown
		shared     []string
		routeLocal []string
	}{
		{
			name: "20 ms and 200 ms behind one pool of 30, 10 clients each then 60",
			s: synth{
				routes: []synthRoute{{path: "/a", lo: 19 * ms, hi: 21 * ms}, {path: "/b", lo: 190 * ms, hi: 210 * ms}},
				pools:  []int{30},
				phases: []synthPhase{{30 * time.Second, []int{10, 10}, nil}, {60 * time.Second, []int{60, 60}, nil}},
			},
			saturated: true, capacity: 30, shared: []string{"GET /a", "GET /b"},
		},
		{
			// The calm minute's many quick answers of /a must not outvote
			// the 40 s since.
			name: "the same, a long calm phase, 40 s loaded",
			s: synth{
				routes: []synthRoute{{path: "/a", lo: 19 * ms, hi: 21 * ms}, {path: "/b", lo: 190 * ms, hi: 210 * ms}},
				pools:  []int{30},
				phases: []synthPhase{{120 * time.Second, []int{10, 10}, nil}, {40 * time.Second, []int{60, 60}, nil}},
			},
			saturated: true, capacity: 30, shared: []string{"GET /a", "GET /b"},
		},
		{
			// A servlet container's pool of 50: a 100 ms page, 20 then 100
			// clients, and a trivial page at 0.2 ms, 20 clients throughout.
			name: "pool of 50: a 100 ms page 20 then 100 clients, a trivial page 20 clients",
			s: synth{
				routes: []synthRoute{
					{path: "/sleep.jsp", lo: 98 * ms, hi: 102 * ms, think: 500 * time.Microsecond},
					{path: "/trivial.jsp", lo: 150 * time.Microsecond, hi: 250 * time.Microsecond, think: 3 * ms},
				},
				pools:  []int{50},
				phases: []synthPhase{{60 * time.Second, []int{20, 20}, nil}, {40 * time.Second, []int{100, 20}, nil}},
			},
			saturated: true, capacity: 50, shared: []string{"GET /sleep.jsp", "GET /trivial.jsp"},
		},
		{
			// One pool of 20 behind a 20 ms and a 1 s route, the second's
			// clients rising: both wait about 0.4 s for the pool, which is
			// 21 times /a's time and 1.4 times /b's. /a is not the route
			// with the bottleneck, it is the one that shows it best.
			name: "20 ms and 1 s behind one pool of 20, the 1 s route 5 then 28 clients",
			s: synth{
				routes: []synthRoute{{path: "/a", lo: 19 * ms, hi: 21 * ms}, {path: "/b", lo: 950 * ms, hi: 1050 * ms}},
				pools:  []int{20},
				phases: []synthPhase{{30 * time.Second, []int{5, 5}, nil}, {60 * time.Second, []int{5, 28}, nil}},
			},
			saturated: true, capacity: 20, shared: []string{"GET /a", "GET /b"},
		},
		{
			// A pool of 10 behind /db alone; /wait stays flat.
			name: "a pool of 10 behind /db only",
			s: synth{
				routes: []synthRoute{{path: "/db", lo: 190 * ms, hi: 210 * ms, pool: 0}, {path: "/wait", lo: 95 * ms, hi: 105 * ms, pool: -1}},
				pools:  []int{10},
				phases: []synthPhase{{30 * time.Second, []int{5, 10}, nil}, {60 * time.Second, []int{50, 10}, nil}},
			},
			saturated: false, capacity: math.NaN(), routeLocal: []string{"GET /db"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := tt.s.play(t)
			f := snap.Figures
			e := f.Estimate
			var routes []string
			for _, rt := range f.Routes {
				routes = append(routes, fmt.Sprintf("%s %v/%v %.1fx sat %v slower %v n %d", rt.Name, rt.ServiceP25, rt.BaselineP25, rt.Stretch, rt.Saturated, rt.Slower, rt.Requests))
			}
			t.Logf("saturated %v, capacity %.1f (%q), at least %.1f, shared %q, local %q; %s; %s", e.Saturated, e.Capacity, e.Unknown, e.LowerBound,
				e.Shared, e.RouteLocal, strings.Join(routes, ", "), snap.Recommendation.Summary)
			if e.Saturated != tt.saturated {
				t.Errorf("Saturated = %v; want %v", e.Saturated, tt.saturated)
			}
			switch {
			case math.IsNaN(tt.capacity):
				if !math.IsNaN(e.Capacity) {
					t.Errorf("Capacity = %.1f; want unknown", e.Capacity)
				}
			case math.Abs(e.Capacity-tt.capacity) > 0.15*tt.capacity:
				t.Errorf("Capacity = %.1f (%.1f to %.1f); want %v within 15%%", e.Capacity, e.CapacityLow, e.CapacityHigh, tt.capacity)
			}
			if !slices.Equal(e.Shared, tt.shared) {
				t.Errorf("Shared = %q; want %q", e.Shared, tt.shared)
			}
			if !slices.Equal(e.RouteLocal, tt.routeLocal) {
				t.Errorf("RouteLocal = %q; want %q", e.RouteLocal, tt.routeLocal)
			}
			r := snap.Recommendation
			if tt.saturated && (r.Workers == 0 || math.Abs(float64(r.Workers)-tt.capacity) > 0.15*tt.capacity) {
				t.Errorf("Workers = %d; want a global cap at about %v", r.Workers, tt.capacity)
			}
			if !tt.saturated && (r.Workers != 0 || r.Bulkhead != 0) {
				t.Errorf("Workers = %d, Bulkhead = %d; want no global cap", r.Workers, r.Bulkhead)
			}
			if want := "shared by " + strings.Join(quoted(tt.shared), ", "); len(tt.shared) > 0 && !strings.Contains(snap.Text(), want) {
				t.Errorf("the text does not say %q:\n%s", want, snap.Text())
			}
		})
	}
}
