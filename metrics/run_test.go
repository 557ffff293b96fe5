package metrics

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAdviceGauges checks that the advice's numbers reach Prometheus as
// given, labels from the bounded sets only, and lint clean.
func TestAdviceGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(Config{
		Registerer: reg, Mode: "unbounded",
		State: func() State { return State{} }, TakePeaks: func() (int64, int64, int64) { return 0, 0, 0 },
		Advice: func() Advice {
			return Advice{Capacity: 50, LowerBound: 10, Saturated: new(true), Workers: 50, Bulkhead: 50, ScrapeErrors: 3,
				Routes:      []RouteAdvice{{Name: "GET /wait", Saturated: true, Capacity: 50, Stretch: 4}},
				Predictions: []PredictionAdvice{{Setting: "recommended", Throughput: 250, P50: 0.8, P99: 0.82, Queue: 0.6}}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		want float64
	}{
		{"loomgate_upstream_capacity_estimate", 50},
		{"loomgate_upstream_capacity_lower_bound", 10},
		{"loomgate_upstream_saturated", 1},
		{"loomgate_advice_workers", 50},
		{"loomgate_advice_bulkhead", 50},
		{"loomgate_route_saturated", 1},
		{"loomgate_route_capacity_estimate", 50},
		{"loomgate_advice_predicted_throughput", 250},
		{"loomgate_advice_predicted_queue_wait_seconds", 0.6},
	} {
		if got := gaugeValue(t, reg, tt.name); got != tt.want {
			t.Errorf("%s = %v; want %v", tt.name, got, tt.want)
		}
	}
	if got := gaugeValue(t, reg, "loomgate_advice_predicted_latency_p99_seconds"); got != 0.82 {
		t.Errorf("predicted p99 = %v; want 0.82", got)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestUnknownCapacityIsNaN(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Registerer: reg, State: func() State { return State{} },
		TakePeaks: func() (int64, int64, int64) { return 0, 0, 0 }}); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, reg, "loomgate_upstream_capacity_estimate"); !math.IsNaN(got) {
		t.Errorf("capacity without advice = %v; want NaN, unknown", got)
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestPeaksAreTheSameForEveryScraper is the HA pair of Prometheus servers:
// a burst between one scraper's scrapes must read the same for a scraper
// that scrapes every 100 ms and for one that scrapes once, and stay visible
// for PeakWindow, then go.
func TestPeaksAreTheSameForEveryScraper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var spike int64 // the limiter's peak since the last TakePeaks
		reg := prometheus.NewRegistry()
		m, err := New(Config{
			Registerer: reg, Mode: "fixed",
			State: func() State { return State{} },
			TakePeaks: func() (int64, int64, int64) {
				mu.Lock()
				defer mu.Unlock()
				v := spike
				spike = 0
				return v, v / 2, v * 1024
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		read := func() float64 { return gaugeValue(t, reg, "loomgate_in_flight_max") }
		// The fast scraper, before and through the burst.
		var fast []float64
		for range 10 {
			fast = append(fast, read())
			time.Sleep(100 * time.Millisecond)
		}
		mu.Lock()
		spike = 30 // 30 requests came and went between two samples
		mu.Unlock()
		for range 10 {
			fast = append(fast, read())
			time.Sleep(100 * time.Millisecond)
		}
		if got := fast[len(fast)-1]; got != 30 {
			t.Errorf("fast scraper after the burst: in_flight_max = %v; want 30 (all: %v)", got, fast)
		}
		// The slow scraper scrapes once, 30 s later, after the fast one's
		// many scrapes: it sees the same peak.
		time.Sleep(30 * time.Second)
		if got := read(); got != 30 {
			t.Errorf("slow scraper 30 s after the burst: in_flight_max = %v; want 30", got)
		}
		if got := gaugeValue(t, reg, "loomgate_in_flight_bytes_max"); got != 30*1024 {
			t.Errorf("in_flight_bytes_max = %v; want %v", got, 30*1024)
		}
		time.Sleep(PeakWindow)
		if got := read(); got != 0 {
			t.Errorf("in_flight_max %v after the burst left the window; want 0", got)
		}
	})
}
