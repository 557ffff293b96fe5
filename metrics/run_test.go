package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// runMetrics starts Run for a Metrics whose in-flight state is *level.
func runMetrics(t *testing.T, cfg Config, level *atomic.Int64) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	cfg.Outcomes = testOutcomes
	cfg.Mode = "unbounded"
	cfg.State = func() State { return State{InFlight: level.Load()} }
	cfg.TakePeaks = func() (int64, int64, int64) { return 0, 0, 0 }
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, reg
}

// TestRunFitsUpstreamMemory serves an upstream whose memory is exactly
// 100 MB plus 1 MB per request in flight, varies the load, and checks that
// Run's scrapes find the slope exactly and export it. The bubble's clock
// and an in-memory transport make every reading land where it should: the
// load changes as the upstream is read, so each reading pairs a memory
// with the load that caused it.
func TestRunFitsUpstreamMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var level atomic.Int64
		var scrapes int
		levels := []int64{10, 10, 10, 30, 30, 30, 20, 20, 20}
		upstream := roundTripper(func(r *http.Request) (*http.Response, error) {
			if !strings.HasPrefix(r.Header.Get("Accept"), "text/plain") {
				t.Errorf("scrape Accept = %q; want the text format", r.Header.Get("Accept"))
			}
			mem := 60_000_000 + 1_000_000*level.Load()
			body := fmt.Sprintf("# TYPE jvm_memory_used_bytes gauge\n"+
				"jvm_memory_used_bytes{area=\"heap\",id=\"eden\"} %d\n"+
				"jvm_memory_used_bytes{area=\"heap\",id=\"old\"} 40000000\n"+
				"jvm_memory_used_bytes{area=\"nonheap\",id=\"meta\"} 7777\n", mem)
			level.Store(levels[min(scrapes, len(levels)-1)])
			scrapes++
			return &http.Response{StatusCode: 200, Status: "200 OK", Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
		})
		level.Store(levels[0])
		m, reg := runMetrics(t, Config{
			UpstreamMetricsURL:   "http://app:8081/metrics",
			UpstreamMemoryMetric: MustParseSelector(`jvm_memory_used_bytes{area="heap"}`),
			// Not a multiple of the sampling interval, so that no sample
			// falls at the instant of a reading.
			ScrapeInterval: 5100 * time.Millisecond,
			Client:         &http.Client{Transport: upstream},
		}, &level)

		time.Sleep(10 * 5100 * time.Millisecond)
		f := m.Snapshot().Figures
		if !near(f.BytesPerRequest, 1e6) {
			t.Errorf("BytesPerRequest = %.0f; want 1e6", f.BytesPerRequest)
		}
		if f.UpstreamMemoryBytes != 120_000_000 {
			t.Errorf("UpstreamMemoryBytes = %.0f; want 1.2e8, the heap series summed at 20 in flight", f.UpstreamMemoryBytes)
		}
		if got := testutil.ToFloat64(m.scrapeErrors); got != 0 {
			t.Errorf("scrape errors = %v; want 0", got)
		}
		// The fit's arithmetic may land a last bit away from 1e6.
		if got := gaugeValue(t, reg, "loomgate_advice_bytes_per_request"); !near(got, 1e6) {
			t.Errorf("loomgate_advice_bytes_per_request = %v; want 1e6", got)
		}
		want := `
# HELP loomgate_upstream_memory_bytes The upstream's memory at its last scrape (LOOMGATE_UPSTREAM_MEMORY_METRIC), 0 when not read.
# TYPE loomgate_upstream_memory_bytes gauge
loomgate_upstream_memory_bytes 1.2e+08
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loomgate_upstream_memory_bytes"); err != nil {
			t.Error(err)
		}
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRunCountsScrapeErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"status 500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", 500) }},
		{"no such series", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "other_metric 1") }},
		{"not the text format", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "<html>") }},
		{"too slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := httptest.NewServer(tt.handler)
			defer up.Close()
			var level atomic.Int64
			m, _ := runMetrics(t, Config{UpstreamMetricsURL: up.URL, ScrapeInterval: 20 * time.Millisecond}, &level)
			deadline := time.Now().Add(5 * time.Second)
			for testutil.ToFloat64(m.scrapeErrors) < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("scrape errors = %v after 5s; want at least 2", testutil.ToFloat64(m.scrapeErrors))
				}
				time.Sleep(5 * time.Millisecond)
			}
			if f := m.Snapshot().Figures; f.UpstreamMemoryBytes != 0 {
				t.Errorf("UpstreamMemoryBytes = %v after failed scrapes; want 0", f.UpstreamMemoryBytes)
			}
		})
	}
}

func TestNewRejectsBadUpstreamConfig(t *testing.T) {
	for _, cfg := range []Config{
		{UpstreamMetricsURL: "ftp://x/metrics"},
		{UpstreamMetricsURL: "http://"},
		{SampleInterval: -1},
		{MemoryBudgetBytes: -1},
	} {
		cfg.Registerer = prometheus.NewRegistry()
		cfg.Outcomes = testOutcomes
		cfg.State = func() State { return State{} }
		cfg.TakePeaks = func() (int64, int64, int64) { return 0, 0, 0 }
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error; want one", cfg)
		}
	}
}

// TestAdviceGauges checks that the gauges carry the same figures as the
// Snapshot, through a registry as Prometheus scrapes it.
func TestAdviceGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := New(Config{
			Registerer: reg, Outcomes: testOutcomes, Mode: "unbounded",
			State: func() State { return State{} }, TakePeaks: func() (int64, int64, int64) { return 0, 0, 0 },
		})
		if err != nil {
			t.Fatal(err)
		}
		// A saturated upstream: one request served in 100 ms when it was
		// idle, then 10 s of 500 rps served in 400 ms with 200 in flight.
		m.Record(Sample{Outcome: "ok", UpstreamStatus: 200, Admission: true, Admitted: true, Service: 100 * time.Millisecond, Total: 100 * time.Millisecond})
		for range 100 {
			time.Sleep(100 * time.Millisecond)
			m.window.sample(time.Now(), 200, 0)
			for range 50 {
				m.Record(Sample{Outcome: "ok", UpstreamStatus: 200, Admission: true, Admitted: true, Service: 400 * time.Millisecond, Total: 400 * time.Millisecond})
			}
		}
		s := m.Snapshot()
		if f := s.Figures; !f.Saturated || !near(f.Capacity, 50.01) || s.Recommendation.Workers != 50 || s.Recommendation.Bulkhead != 50 {
			t.Fatalf("figures %+v, recommendation %+v; want saturated at a capacity of 50.01 and 50 workers", f, s.Recommendation)
		}
		for _, tt := range []struct {
			name string
			want float64
		}{
			{"loomgate_upstream_capacity_estimate", 50.01},
			{"loomgate_upstream_saturated", 1},
			{"loomgate_advice_workers", 50},
			{"loomgate_advice_bulkhead", 50},
			{"loomgate_upstream_memory_bytes", 0},
			{"loomgate_advice_bytes_per_request", 0},
		} {
			if got := gaugeValue(t, reg, tt.name); !near(got, tt.want) {
				t.Errorf("%s = %v; want %v", tt.name, got, tt.want)
			}
		}
		problems, err := testutil.GatherAndLint(reg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	})
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
			Registerer: reg, Outcomes: testOutcomes, Mode: "fixed", Limit: 4,
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
