package metrics

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRequestSecondsCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	fs := &fakeState{}
	in, q := 12.5, 0.75
	_, err := New(Config{
		Registerer: reg, Mode: "fixed", Version: "test",
		State: fs.State, TakePeaks: fs.TakePeaks,
		RequestSeconds: func() (float64, float64) { return in, q },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP loomgate_in_flight_seconds_total Time-integral of loomgate_in_flight in request-seconds, updated at every admission and release: its rate is the mean concurrency over the range, bursts between scrapes included.
# TYPE loomgate_in_flight_seconds_total counter
loomgate_in_flight_seconds_total 12.5
# HELP loomgate_queued_seconds_total Time-integral of loomgate_queued in request-seconds, updated at every change of the queue: its rate is the mean queue depth over the range.
# TYPE loomgate_queued_seconds_total counter
loomgate_queued_seconds_total 0.75
`
	names := []string{"loomgate_in_flight_seconds_total", "loomgate_queued_seconds_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	in, q = 20, 3
	if got := testutil.ToFloat64(mustCollector(t, reg, "loomgate_in_flight_seconds_total")); got != 20 {
		t.Errorf("loomgate_in_flight_seconds_total = %v after the integral moved to 20; want 20", got)
	}
}

// Without RequestSeconds the counters are absent, not zero: a zero counter
// would read as an idle replica.
func TestRequestSecondsAbsentWithoutSource(t *testing.T) {
	_, reg, _ := newTestMetrics(t)
	n, err := testutil.GatherAndCount(reg, "loomgate_in_flight_seconds_total", "loomgate_queued_seconds_total")
	if err != nil || n != 0 {
		t.Errorf("GatherAndCount = %d, %v; want 0 series", n, err)
	}
}

func TestCapacity(t *testing.T) {
	estimate := func(c float64) func() Advice { return func() Advice { return Advice{Capacity: c} } }
	tests := []struct {
		mode   string
		limit  int64
		advice func() Advice
		want   float64
		ok     bool
	}{
		{"fixed", 32, estimate(50), 32, true},
		{"adaptive", 17, estimate(50), 17, true},
		{"adaptive", 0, estimate(50), 50, true}, // before the first limit
		{"adaptive", 0, estimate(math.NaN()), 0, false},
		{"unbounded", 0, estimate(41.5), 41.5, true},
		{"unbounded", 100, estimate(41.5), 41.5, true}, // a bulkhead is a bound, not a capacity
		{"unbounded", 0, estimate(math.NaN()), 0, false},
		{"unbounded", 0, estimate(math.Inf(1)), 0, false},
		{"unbounded", 0, nil, 0, false},
	}
	for _, tt := range tests {
		got, ok := Capacity(tt.mode, tt.limit, tt.advice)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Capacity(%q, %d, estimate) = %v, %v; want %v, %v", tt.mode, tt.limit, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCapacityGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	fs := &fakeState{}
	capacity := math.NaN()
	_, err := New(Config{
		Registerer: reg, Mode: "unbounded", Version: "test",
		State: fs.State, TakePeaks: fs.TakePeaks,
		Advice: func() Advice { return Advice{Capacity: capacity} },
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "loomgate_capacity"); err != nil || n != 0 {
		t.Errorf("loomgate_capacity series with no estimate = %d, %v; want 0", n, err)
	}
	capacity = 24
	if got := testutil.ToFloat64(mustCollector(t, reg, "loomgate_capacity")); got != 24 {
		t.Errorf("loomgate_capacity = %v with an estimate of 24; want 24", got)
	}
}

// mustCollector returns a collector that gathers reg's family name alone,
// for testutil.ToFloat64.
func mustCollector(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			}
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(v)
			return g
		}
	}
	t.Fatalf("%s: no single series gathered", name)
	return nil
}
