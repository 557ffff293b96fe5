package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loomgate/loomgate/internal/outcome"
)

type fakeState struct {
	state                    State
	peakIn, peakQ, peakBytes int64
	peaksCalls               int
}

func (f *fakeState) State() State { return f.state }
func (f *fakeState) TakePeaks() (int64, int64, int64) {
	f.peaksCalls++
	return f.peakIn, f.peakQ, f.peakBytes
}

func newTestMetrics(t testing.TB) (*Metrics, *prometheus.Registry, *fakeState) {
	t.Helper()
	reg := prometheus.NewRegistry()
	fs := &fakeState{}
	m, err := New(Config{
		Registerer: reg, Mode: "fixed", QueueLimit: 10, Version: "test",
		State: fs.State, TakePeaks: fs.TakePeaks,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg, fs
}

func TestNewRequiresItsInputs(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New(Config{}) = nil error; want one naming what is required")
	}
}

func TestRecord(t *testing.T) {
	m, reg, _ := newTestMetrics(t)
	m.Record(&outcome.Record{Kind: outcome.OK, UpstreamStatus: 200, Admission: true, Admitted: true, Queue: 2 * time.Millisecond, Service: 100 * time.Millisecond, Total: 103 * time.Millisecond})
	m.Record(&outcome.Record{Kind: outcome.OK, UpstreamStatus: 503, Admission: true, Admitted: true, Service: 5 * time.Millisecond, Total: 6 * time.Millisecond})
	m.Record(&outcome.Record{Kind: outcome.RejectedQueueTimeout, Admission: true, Queue: 30 * time.Second, Total: 30 * time.Second})
	m.Record(&outcome.Record{Kind: outcome.BadRequest})

	want := `
# HELP loomgate_requests_total Requests finished, by outcome.
# TYPE loomgate_requests_total counter
loomgate_requests_total{outcome="bad_request"} 1
loomgate_requests_total{outcome="client_closed"} 0
loomgate_requests_total{outcome="client_reset"} 0
loomgate_requests_total{outcome="client_timeout"} 0
loomgate_requests_total{outcome="drain_timeout"} 0
loomgate_requests_total{outcome="internal_error"} 0
loomgate_requests_total{outcome="ok"} 2
loomgate_requests_total{outcome="rejected_bulkhead"} 0
loomgate_requests_total{outcome="rejected_memory"} 0
loomgate_requests_total{outcome="rejected_queue_full"} 0
loomgate_requests_total{outcome="rejected_queue_timeout"} 1
loomgate_requests_total{outcome="rejected_upgraded"} 0
loomgate_requests_total{outcome="upstream_error"} 0
loomgate_requests_total{outcome="upstream_timeout"} 0
# HELP loomgate_upstream_responses_total Responses received from the upstream, by status class.
# TYPE loomgate_upstream_responses_total counter
loomgate_upstream_responses_total{code_class="1xx"} 0
loomgate_upstream_responses_total{code_class="2xx"} 1
loomgate_upstream_responses_total{code_class="3xx"} 0
loomgate_upstream_responses_total{code_class="4xx"} 0
loomgate_upstream_responses_total{code_class="5xx"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loomgate_requests_total", "loomgate_upstream_responses_total"); err != nil {
		t.Error(err)
	}
	for _, tt := range []struct {
		name  string
		count uint64
		sum   float64
	}{
		{"loomgate_queue_wait_seconds", 3, 30.002},
		{"loomgate_service_seconds", 2, 0.105},
		{"loomgate_request_seconds", 4, 30.109},
	} {
		count, sum := histogram(t, reg, tt.name)
		if count != tt.count || fmt.Sprintf("%.3f", sum) != fmt.Sprintf("%.3f", tt.sum) {
			t.Errorf("%s count %d sum %.3f; want %d and %.3f", tt.name, count, sum, tt.count, tt.sum)
		}
	}
}

func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no %s", name)
	return 0, 0
}

func TestGaugesAndLint(t *testing.T) {
	_, reg, fs := newTestMetrics(t)
	fs.state = State{InFlight: 3, Queued: 7, Bytes: 4096, Limit: 4}
	fs.peakIn, fs.peakQ, fs.peakBytes = 4, 9, 8192
	want := `
# HELP loomgate_in_flight Requests admitted and not finished.
# TYPE loomgate_in_flight gauge
loomgate_in_flight 3
# HELP loomgate_queued Requests waiting for admission.
# TYPE loomgate_queued gauge
loomgate_queued 7
# HELP loomgate_in_flight_bytes Bytes reserved by admitted and waiting requests.
# TYPE loomgate_in_flight_bytes gauge
loomgate_in_flight_bytes 4096
# HELP loomgate_in_flight_max Highest loomgate_in_flight in the last minute.
# TYPE loomgate_in_flight_max gauge
loomgate_in_flight_max 4
# HELP loomgate_queued_max Highest loomgate_queued in the last minute.
# TYPE loomgate_queued_max gauge
loomgate_queued_max 9
# HELP loomgate_in_flight_bytes_max Highest loomgate_in_flight_bytes in the last minute.
# TYPE loomgate_in_flight_bytes_max gauge
loomgate_in_flight_bytes_max 8192
# HELP loomgate_limit Enforced concurrency limit, 0 when there is none; in adaptive mode, the limit in force now.
# TYPE loomgate_limit gauge
loomgate_limit 4
# HELP loomgate_queue_limit Most requests allowed to wait, 0 when the queue is bounded by time alone or absent.
# TYPE loomgate_queue_limit gauge
loomgate_queue_limit 10
# HELP loomgate_mode_info The admission mode in force.
# TYPE loomgate_mode_info gauge
loomgate_mode_info{mode="fixed"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"loomgate_in_flight", "loomgate_queued", "loomgate_in_flight_bytes", "loomgate_in_flight_max",
		"loomgate_queued_max", "loomgate_in_flight_bytes_max", "loomgate_limit", "loomgate_queue_limit", "loomgate_mode_info"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	m, _, _ := newTestMetrics(t)
	s := &outcome.Record{Kind: outcome.OK, UpstreamStatus: 200, Admission: true, Admitted: true, Queue: time.Millisecond, Service: time.Millisecond, Total: 2 * time.Millisecond}
	if n := testing.AllocsPerRun(1000, func() { m.Record(s) }); n != 0 {
		t.Errorf("Record allocates %v times per call; want 0", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	m, _, _ := newTestMetrics(b)
	s := outcome.Record{Kind: outcome.OK, UpstreamStatus: 200, Admission: true, Admitted: true, Queue: time.Millisecond, Service: 40 * time.Millisecond, Total: 42 * time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := s
		for pb.Next() {
			m.Record(&s)
		}
	})
}

func ExampleMetrics_Record() {
	reg := prometheus.NewRegistry()
	m, _ := New(Config{
		Registerer: reg, Mode: "unbounded", Version: "dev",
		State:     func() State { return State{} },
		TakePeaks: func() (int64, int64, int64) { return 0, 0, 0 },
	})
	m.Record(&outcome.Record{Kind: outcome.OK, UpstreamStatus: 200, Admission: true, Admitted: true, Service: 120 * time.Millisecond, Total: 121 * time.Millisecond})
	n, _ := testutil.GatherAndCount(reg, "loomgate_service_seconds")
	fmt.Println("service histograms:", n)
	// Output: service histograms: 1
}

// TestRecordByLevel: with priority levels, each request is also counted
// under its level, its queue wait observed there, and each level's in
// flight and waiting read at the scrape; every level's series exists
// before its first request.
func TestRecordByLevel(t *testing.T) {
	reg := prometheus.NewRegistry()
	fs := &fakeState{}
	m, err := New(Config{
		Registerer: reg, Mode: "fixed", Version: "test", State: fs.State, TakePeaks: fs.TakePeaks,
		Levels: []string{"sheddable", "default", "high", "critical"},
		LevelState: func() []LevelState {
			return []LevelState{{InFlight: 3, Queued: 40}, {}, {}, {InFlight: 10, Queued: 1}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Record(&outcome.Record{Kind: outcome.OK, Level: 3, Admission: true, Admitted: true, Queue: 20 * time.Millisecond, Total: 70 * time.Millisecond})
	m.Record(&outcome.Record{Kind: outcome.RejectedQueueFull, Level: 0, Admission: true, Total: time.Millisecond})
	m.Record(&outcome.Record{Kind: outcome.RejectedQueueFull, Level: 0, Admission: true, Total: time.Millisecond})

	want := `
# HELP loomgate_level_in_flight Requests admitted and not finished, by priority level.
# TYPE loomgate_level_in_flight gauge
loomgate_level_in_flight{level="critical"} 10
loomgate_level_in_flight{level="default"} 0
loomgate_level_in_flight{level="high"} 0
loomgate_level_in_flight{level="sheddable"} 3
# HELP loomgate_level_queued Requests waiting for admission, by priority level.
# TYPE loomgate_level_queued gauge
loomgate_level_queued{level="critical"} 1
loomgate_level_queued{level="default"} 0
loomgate_level_queued{level="high"} 0
loomgate_level_queued{level="sheddable"} 40
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loomgate_level_in_flight", "loomgate_level_queued"); err != nil {
		t.Error(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			key := f.GetName()
			for _, l := range s.GetLabel() {
				key += fmt.Sprintf(" %s=%s", l.GetName(), l.GetValue())
			}
			switch {
			case s.Counter != nil:
				got[key] = s.Counter.GetValue()
			case s.Histogram != nil:
				got[key+" count"] = float64(s.Histogram.GetSampleCount())
				got[key+" sum"] = s.Histogram.GetSampleSum()
			}
		}
	}
	for key, want := range map[string]float64{
		"loomgate_level_requests_total level=critical outcome=ok":                   1,
		"loomgate_level_requests_total level=sheddable outcome=rejected_queue_full": 2,
		"loomgate_level_requests_total level=high outcome=ok":                       0,
		"loomgate_level_queue_wait_seconds level=critical count":                    1,
		"loomgate_level_queue_wait_seconds level=critical sum":                      0.02,
		"loomgate_level_queue_wait_seconds level=sheddable count":                   2,
		"loomgate_level_queue_wait_seconds level=default count":                     0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (exported %v); want %v", key, v, ok, want)
		}
	}
}
