package advice

import (
	"github.com/loomgate/loomgate/limiter"

	"math"
	"strings"
	"testing"
	"time"
)

// Requests that arrive whatever the latency (many independent users) are
// open demand: above the capacity they fill a queue at the rate beyond it,
// where a fixed number of clients would wait for their answers and hold
// it. The advice must tell one from the other by what it measured, say
// which it used, and predict the recommended setting for it.
func TestOpenDemand(t *testing.T) {
	ms := time.Millisecond
	pool40 := []synthRoute{{path: "/wait", lo: 95 * ms, hi: 105 * ms}}
	// The inactive fixed mode's settings are the sidecar's defaults.
	first := synth{routes: pool40, pools: []int{40}, settings: Settings{Workers: 200, QueueSize: 10000, QueueTimeout: 30 * time.Second},
		phases: []synthPhase{{30 * time.Second, nil, []float64{200}}, {30 * time.Second, nil, []float64{480}}}}.play(t)
	f, r := first.Figures, first.Recommendation
	t.Logf("%s", first.Text())
	if !f.DemandOpen || math.Abs(f.OpenRate-480) > 0.15*480 {
		t.Errorf("DemandOpen = %v, OpenRate = %.0f (%s); want open demand at 480 rps", f.DemandOpen, f.OpenRate, f.DemandWhy)
	}
	if e := f.Estimate; !e.Saturated || math.Abs(e.Capacity-40) > 0.15*40 {
		t.Errorf("saturated %v, capacity %.1f; want saturated, 40", e.Saturated, e.Capacity)
	}
	if !strings.Contains(strings.Join(r.Reasons, " "), "open") {
		t.Errorf("the reasons do not say the demand is open: %q", r.Reasons)
	}
	if r.Workers == 0 {
		t.Fatalf("no cap advised: %s", r.Summary)
	}
	var predicted Prediction
	for _, p := range r.Predictions {
		if p.Name == "recommended" {
			predicted = p
		}
	}
	applied := synth{routes: pool40, pools: []int{40},
		settings: Settings{Mode: limiter.Fixed, Workers: r.Workers, QueueSize: 10000, QueueTimeout: 30 * time.Second},
		phases:   []synthPhase{{60 * time.Second, nil, []float64{480}}}}.play(t)
	m := applied.Figures
	t.Logf("applied WORKERS=%d: %s", r.Workers, applied.Text())
	// The queue grows through the minute: its tail is the minute's last
	// seconds, not the moment the advice was read.
	if math.Abs(predicted.Throughput-m.Throughput) > 0.15*m.Throughput || math.Abs(float64(predicted.P50-m.LatencyP50)) > 0.25*float64(m.LatencyP50) ||
		math.Abs(float64(predicted.P99-m.LatencyP99)) > 0.25*float64(m.LatencyP99) {
		t.Errorf("predicted for WORKERS=%d: %.0f rps, p50 %s, p99 %s; measured %.0f rps, p50 %s, p99 %s", r.Workers,
			predicted.Throughput, predicted.P50, predicted.P99, m.Throughput, m.LatencyP50, m.LatencyP99)
	}
	if !predicted.Open || predicted.QueueGrowth < 60 {
		t.Errorf("prediction for WORKERS=%d: open %v, queue growth %.0f a second; want open, about 80", r.Workers, predicted.Open, predicted.QueueGrowth)
	}

	// Clients that wait for their answers are closed demand.
	closed := synth{routes: []synthRoute{{path: "/wait", lo: 95 * ms, hi: 105 * ms}}, pools: []int{50},
		phases: []synthPhase{{20 * time.Second, []int{10}, nil}, {60 * time.Second, []int{200}, nil}}}.play(t)
	if closed.Figures.DemandOpen {
		t.Errorf("10 then 200 clients: DemandOpen = true (%s); want closed", closed.Figures.DemandWhy)
	}
}
