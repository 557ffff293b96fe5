package advice

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/series"
)

// runAdvisor starts Run for an Advisor whose in-flight state is *level.
func runAdvisor(t *testing.T, cfg Config, level *atomic.Int64) *Advisor {
	t.Helper()
	cfg.State = func() State { return State{InFlight: level.Load()} }
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
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
		m := runAdvisor(t, Config{
			UpstreamMetricsURL:   "http://app:8081/metrics",
			UpstreamMemoryMetric: series.MustParse(`jvm_memory_used_bytes{area="heap"}`),
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
		if got := float64(m.ScrapeErrors()); got != 0 {
			t.Errorf("scrape errors = %v; want 0", got)
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
			m := runAdvisor(t, Config{UpstreamMetricsURL: up.URL, ScrapeInterval: 20 * time.Millisecond}, &level)
			deadline := time.Now().Add(5 * time.Second)
			for float64(m.ScrapeErrors()) < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("scrape errors = %v after 5s; want at least 2", float64(m.ScrapeErrors()))
				}
				time.Sleep(5 * time.Millisecond)
			}
			if f := m.Snapshot().Figures; f.UpstreamMemoryBytes != 0 {
				t.Errorf("UpstreamMemoryBytes = %v after failed scrapes; want 0", f.UpstreamMemoryBytes)
			}
		})
	}
}

// TestMetricsURLWithSpaceIsRefused: url.Parse takes a space into a path,
// and /metrics%20 was scraped, failing every time.
func TestMetricsURLWithSpaceIsRefused(t *testing.T) {
	for _, u := range []string{"http://app:8081/metrics ", "http://app:8081/me trics", " http://app:8081/metrics"} {
		cfg := Config{State: func() State { return State{} }, UpstreamMetricsURL: u}
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate with UpstreamMetricsURL %q = nil; want a problem", u)
		}
	}
}
