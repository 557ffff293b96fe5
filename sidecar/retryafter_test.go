package sidecar

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/proxy"
)

func TestRetryAfterFromLiveState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			env     []string
			service time.Duration
			want    map[proxy.Kind]time.Duration
		}{
			{
				// 2 workers busy, 3 queued, 3 s each: a full queue puts a
				// retry 4th, 4 × 3 s ÷ 2 = 6 s; a timed-out request leaves
				// 3 ahead, 4.5 s, rounded up to 5; memory frees as one of
				// the 2 in flight finishes, 1.5 s, rounded up to 2.
				name: "fixed", env: []string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=2", "LOOMGATE_QUEUE_SIZE=3", "LOOMGATE_QUEUE_TIMEOUT=10s"},
				service: 3 * time.Second,
				want: map[proxy.Kind]time.Duration{
					proxy.RejectedQueueFull: 6 * time.Second, proxy.RejectedQueueTimeout: 5 * time.Second, proxy.RejectedMemory: 2 * time.Second,
				},
			},
			{
				// 20 s each would be 40 s; never more than QUEUE_TIMEOUT.
				name: "capped", env: []string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=2", "LOOMGATE_QUEUE_SIZE=3", "LOOMGATE_QUEUE_TIMEOUT=10s"},
				service: 20 * time.Second,
				want:    map[proxy.Kind]time.Duration{proxy.RejectedQueueFull: 10 * time.Second},
			},
			{
				// The bulkhead waits at most 2.5 s: 4 × 3 s ÷ 2 is capped
				// at 3 s.
				name: "bulkhead", env: []string{"LOOMGATE_BULKHEAD=2", "LOOMGATE_BULKHEAD_WAIT=2500ms"},
				service: 3 * time.Second,
				want:    map[proxy.Kind]time.Duration{proxy.RejectedBulkhead: 3 * time.Second},
			},
			{
				// Failing fast: a bulkhead without a wait says 1 s.
				name: "fail fast", env: []string{"LOOMGATE_BULKHEAD=2"},
				service: 3 * time.Second,
				want:    map[proxy.Kind]time.Duration{proxy.RejectedBulkhead: time.Second},
			},
		} {
			cfg := testConfig(t, append(tt.env, "LOOMGATE_UPSTREAM=http://127.0.0.1:1")...)
			s, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			// Two in flight, and in fixed mode or with a bulkhead wait
			// three waiting.
			ctx := context.Background()
			for range 2 {
				if err := s.policy.held.Acquire(ctx, 0); err != nil {
					t.Fatal(err)
				}
			}
			waitCtx, stopWaiting := context.WithCancel(ctx)
			var waiters sync.WaitGroup
			if cfg.Mode == limiter.Fixed || cfg.BulkheadWait > 0 {
				for range 3 {
					waiters.Go(func() {
						if s.policy.held.Acquire(waitCtx, 0) == nil {
							s.policy.held.Release(0)
						}
					})
				}
			}
			synctest.Wait()
			time.Sleep(time.Second)
			s.advisor.Record(&proxy.Outcome{Admission: true, Admitted: true, UpstreamStatus: 200, Service: tt.service})
			for kind, want := range tt.want {
				if got := s.retryAfter(kind); got != want {
					st := s.Stats()
					t.Errorf("%s: retryAfter(%v) with %d in flight, %d queued, %v service = %v; want %v",
						tt.name, kind, st.InFlight, st.Queued, tt.service, got, want)
				}
			}
			stopWaiting()
			waiters.Wait()
			s.policy.held.Release(0)
			s.policy.held.Release(0)
		}
	})
}

// TestRetryAfterHeader checks the header a rejected client receives, from a
// sidecar whose queue is full.
func TestRetryAfterHeader(t *testing.T) {
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM="+upstream(t, 500*time.Millisecond), "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=1", "LOOMGATE_QUEUE_SIZE=0"))
	// Teach the window a 2 s service time, then fill the only worker for
	// long enough to be refused a second request.
	s.advisor.Record(&proxy.Outcome{Admission: true, Admitted: true, UpstreamStatus: 200, Service: 2 * time.Second})
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		if resp, err := http.Get(s.URL + "/busy"); err == nil {
			resp.Body.Close()
		}
	}()
	for s.Stats().InFlight != 1 {
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(s.URL + "/rejected")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// A retry would be first in line behind one worker busy for 2 s; the
	// queue timeout (30 s by default) does not bind.
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("rejected request = %d, Retry-After %q; want 503, 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	<-busy
}
