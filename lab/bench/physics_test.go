package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench/scrape"
)

func TestPhysicsCheck(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name        string
		in          Physics
		wantFlag    bool
		wantExpect  float64
		wantCeiling float64
		wantReason  string // substring; empty when not flagged
	}{
		{
			name:       "unsaturated, on C/R",
			in:         Physics{Concurrency: 100, RPS: 495, Mean: 202 * ms},
			wantExpect: 100 / 0.202,
		},
		{
			name:       "unsaturated, 9% short is within tolerance",
			in:         Physics{Concurrency: 100, RPS: 450, Mean: 202 * ms},
			wantExpect: 100 / 0.202,
		},
		{
			name:       "unsaturated, 20% short of C/R",
			in:         Physics{Concurrency: 100, RPS: 396, Mean: 202 * ms},
			wantFlag:   true,
			wantExpect: 100 / 0.202,
			wantReason: "396 rps is 20% below C/R = 100 / 202 ms = 495 rps: fewer than C requests were in flight",
		},
		{
			name:       "short of C/R because of errors",
			in:         Physics{Concurrency: 100, RPS: 300, Mean: 200 * ms, Errors: 1200},
			wantFlag:   true,
			wantExpect: 500,
			wantReason: "1200 errors took part of the loop",
		},
		{
			name:       "above C/R is impossible",
			in:         Physics{Concurrency: 10, RPS: 80, Mean: 200 * ms},
			wantFlag:   true,
			wantExpect: 50,
			wantReason: "60% above C/R",
		},
		{
			// 4 users at 56 ms over a 1 s window: up to 4 of the 80
			// completions were sent before it began (R/W = 5.6%).
			name:       "a short window's edge is no error",
			in:         Physics{Concurrency: 4, RPS: 80, Mean: 56 * ms, Window: time.Second},
			wantExpect: 4 / 0.056,
		},
		{
			name:       "beyond the window's edge is",
			in:         Physics{Concurrency: 4, RPS: 90, Mean: 56 * ms, Window: time.Second},
			wantFlag:   true,
			wantExpect: 4 / 0.056,
			wantReason: "26% above C/R",
		},
		{
			name:        "saturated fixed 200, on N/S",
			in:          Physics{Concurrency: 1000, RPS: 985, Mean: 1015 * ms, Limit: 200, Service: 203 * ms},
			wantExpect:  200 / 0.203,
			wantCeiling: 200 / 0.203,
		},
		{
			name:        "unsaturated with a known limit: C/R, and under the ceiling",
			in:          Physics{Concurrency: 100, RPS: 495, Mean: 202 * ms, Limit: 200, Service: 202 * ms},
			wantExpect:  100 / 0.202,
			wantCeiling: 200 / 0.202,
		},
		{
			name:        "above the ceiling: the limit is not what it says",
			in:          Physics{Concurrency: 500, RPS: 2450, Mean: 204 * ms, Limit: 200, Service: 200 * ms},
			wantFlag:    true,
			wantExpect:  1000,
			wantCeiling: 1000,
			wantReason:  "2450 rps is 145% above limit/service = 200 / 200 ms = 1000 rps: more than the limit was in service",
		},
		{
			name:        "saturated far below the ceiling: a hidden limit",
			in:          Physics{Concurrency: 1000, RPS: 600, Mean: 1667 * ms, Limit: 200, Service: 200 * ms},
			wantFlag:    true,
			wantExpect:  1000,
			wantCeiling: 1000,
			wantReason:  "although c1000 exceeds the limit: something other than the limit caps throughput",
		},
		{
			name:        "pool 10 at 200 ms: 50 rps",
			in:          Physics{Concurrency: 200, RPS: 49.6, Mean: 4030 * ms, Limit: 10, Service: 200 * ms},
			wantExpect:  50,
			wantCeiling: 50,
		},
		{
			name:       "nothing succeeded",
			in:         Physics{Concurrency: 10, Errors: 7},
			wantFlag:   true,
			wantReason: "no successful request in the window, 7 errors",
		},
	}
	for _, tt := range tests {
		v := tt.in.Check()
		if v.Flagged != tt.wantFlag || !strings.Contains(v.Reason, tt.wantReason) || (tt.wantReason == "") != (v.Reason == "") {
			t.Errorf("%s: %+v.Check() = flagged %v, reason %q; want flagged %v, reason containing %q",
				tt.name, tt.in, v.Flagged, v.Reason, tt.wantFlag, tt.wantReason)
		}
		if !near(v.Expected, tt.wantExpect) || !near(v.Ceiling, tt.wantCeiling) {
			t.Errorf("%s: %+v.Check() = expected %.2f, ceiling %.2f; want %.2f, %.2f",
				tt.name, tt.in, v.Expected, v.Ceiling, tt.wantExpect, tt.wantCeiling)
		}
		if v.Expected > 0 && !near(v.Off, tt.in.RPS/v.Expected-1) {
			t.Errorf("%s: Off = %v; want %v", tt.name, v.Off, tt.in.RPS/v.Expected-1)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestResultPhysicsPrefersDeclaredCapacity(t *testing.T) {
	r := Result{Concurrency: 50, RPS: 50, Mean: time.Second,
		Sidecar: &scrape.SidecarStats{Loomgate: true, Limit: 200, Service: time.Second}}
	tests := []struct {
		c           Capacity
		sidecar     *scrape.SidecarStats
		wantLimit   int
		wantService time.Duration
	}{
		{Capacity{Limit: 10, Hold: 200 * time.Millisecond}, r.Sidecar, 10, 200 * time.Millisecond},
		{Capacity{}, r.Sidecar, 200, time.Second},
		{Capacity{}, &scrape.SidecarStats{Loomgate: true}, 0, 0}, // unbounded: no limit
		{Capacity{}, &scrape.SidecarStats{Loomgate: false, Limit: 5, Service: time.Second}, 0, 0},
		{Capacity{}, nil, 0, 0},
	}
	for _, tt := range tests {
		r.Sidecar = tt.sidecar
		p := r.PhysicsFor(tt.c)
		if p.Limit != tt.wantLimit || p.Service != tt.wantService {
			t.Errorf("physics(%+v) with sidecar %+v = limit %d, service %v; want %d, %v",
				tt.c, tt.sidecar, p.Limit, p.Service, tt.wantLimit, tt.wantService)
		}
	}
}
