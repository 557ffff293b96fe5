package sidecar

import (
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/loomgate/loomgate/internal/upstreamtest"
)

// A service first seen at its peak, as users add loomgate: a pool of 20
// at 50 ms behind 150 clients from the first second, so that nothing
// calmer is ever seen. Without a probe, whether it queues inside is
// unknown, and said so; with one, its capacity is found within seconds,
// and in adaptive mode (where the probe is on by default) the limit is
// set there.
func TestFirstSeenAtItsPeak(t *testing.T) {
	realTime(t, "about two minutes")
	const pool, clients = 20, 150
	tests := []struct {
		name string
		env  []string
		// probe: a probe finds the capacity; otherwise it stays unknown.
		probe    bool
		adaptive bool
		// open, if set, is arrivals a second in place of the clients: a
		// fifth above what the pool serves, from the first second, so that
		// its calmest seconds are already past the knee.
		open int
	}{
		{"unbounded, no probe", []string{"LOOMGATE_MODE=unbounded"}, false, false, 0},
		{"unbounded, LOOMGATE_PROBE=on", []string{"LOOMGATE_MODE=unbounded", "LOOMGATE_PROBE=on"}, true, false, 0},
		{"adaptive", []string{"LOOMGATE_MODE=adaptive", "LOOMGATE_QUEUE_TIMEOUT=30s"}, true, true, 0},
		{"open arrivals, LOOMGATE_PROBE=on", []string{"LOOMGATE_MODE=unbounded", "LOOMGATE_PROBE=on"}, true, false, 480},
	}
	if raceEnabled {
		// The probe reads the capacity as throughput times the service
		// time it saw with fewer inside: the race detector's slowdown of
		// the rig and the sidecar adds to every service time (74 ms for
		// the pool's 50 on a busy machine), and the capacity read grows
		// with it. At 480 arrivals a second the rig, not the pool, would
		// be the bottleneck.
		t.Skip("measures capacity under load, which the race detector's slowdown changes")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.HiddenPool(t, pool, 50*time.Millisecond)
			s := start(t, testConfig(t, append(tt.env, "LOOMGATE_UPSTREAM="+up)...))
			var wg sync.WaitGroup
			stop := make(chan struct{})
			defer func() { close(stop); wg.Wait() }()
			begun := time.Now()
			within := 30 * time.Second
			if tt.open > 0 {
				// The first step drains the hundreds inside the pool.
				within = 45 * time.Second
				wg.Go(func() { openLoop(s.URL+"/r", tt.open, within) })
			} else {
				closedLoop(s.URL+"/r", clients, stop, &wg)
			}

			// Within 30 s of the first request: found, or said unknown.
			var doc AdviceDoc
			for {
				time.Sleep(time.Second)
				doc = adviceDoc(t, s)
				f := doc.Figures
				found := f.UpstreamSaturated != nil && *f.UpstreamSaturated && f.UpstreamCapacity != nil
				if tt.adaptive {
					found = found && s.Stats().Limit > 0
				}
				if found && tt.probe || time.Since(begun) > within {
					break
				}
			}
			took := time.Since(begun)
			f := doc.Figures
			logAdviceText(t, s)
			if f.UpstreamSaturated != nil && !*f.UpstreamSaturated {
				t.Errorf("upstream_saturated = false; a pool of %d holds %d", pool, clients)
			}
			if f.CapacityLowerBound > pool*1.15 {
				t.Errorf("upstream_capacity_lower_bound = %.0f; above the pool of %d", f.CapacityLowerBound, pool)
			}
			if !tt.probe {
				if f.UpstreamSaturated != nil || f.SaturatedUnknown == "" {
					t.Errorf("upstream_saturated = %v (%q); want null, with why", f.UpstreamSaturated, f.SaturatedUnknown)
				}
				if f.UpstreamCapacity != nil {
					t.Errorf("upstream_capacity = %.1f; want unknown", *f.UpstreamCapacity)
				}
				if got := gathered(t, s.Sidecar, "loomgate_upstream_saturated", ""); !math.IsNaN(got) {
					t.Errorf("loomgate_upstream_saturated = %v; want NaN, unknown", got)
				}
				return
			}
			if f.UpstreamSaturated == nil || !*f.UpstreamSaturated || f.UpstreamCapacity == nil {
				t.Fatalf("after %s: upstream_saturated %v, capacity %v (%s); want saturated, and the capacity found",
					took.Round(time.Second), f.UpstreamSaturated, f.UpstreamCapacity, f.CapacityUnknown)
			}
			t.Logf("found in %s: capacity %.1f", took.Round(100*time.Millisecond), *f.UpstreamCapacity)
			if c := *f.UpstreamCapacity; math.Abs(c-pool) > 0.15*pool {
				t.Errorf("upstream_capacity = %.1f; want %d within 15%%", c, pool)
			}
			if probes := gathered(t, s.Sidecar, "loomgate_probes_total", "queueing"); probes != 1 {
				t.Errorf("loomgate_probes_total{result=queueing} = %v; want 1", probes)
			}
			if p := doc.Probe; p == nil || p.Probes != 1 || p.Last == nil || p.Last.Result != "queueing" || len(p.Last.Steps) < 2 {
				t.Errorf("/advice probe = %+v; want the one probe, queueing, with its steps", p)
			}
			if !tt.adaptive {
				return
			}
			// Held: the limit stays near the pool.
			time.Sleep(10 * time.Second)
			if l := s.Stats().Limit; math.Abs(float64(l-pool)) > 0.15*pool {
				t.Errorf("adaptive limit = %d, 10 s after it was set; want %d within 15%%", l, pool)
				for _, ch := range adviceDoc(t, s).Adaptive.Changes {
					t.Logf("%s %d → %d %s: %s", ch.Time.Format(time.TimeOnly), ch.From, ch.To, ch.Reason, ch.Detail)
				}
			}
			for _, kind := range []string{"rejected_queue_full", "rejected_queue_timeout"} {
				if n := gathered(t, s.Sidecar, "loomgate_requests_total", kind); n > 0 {
					t.Errorf("loomgate_requests_total{outcome=%s} = %v; want none", kind, n)
				}
			}
		})
	}
}

func logAdviceText(t *testing.T, s *running) {
	t.Helper()
	resp, err := http.Get(s.AdminURL + "/advice?format=text")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	t.Logf("advice:\n%s", b)
}

// A probe under way when the drain begins ends there and lifts its cap:
// the requests it held back are served within the drain, not held until
// its end rejects them.
func TestDrainLiftsAProbesCap(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs load for about 20 seconds")
	}
	// 200 ms requests: a probe's step lasts seconds, well past the second
	// the drain has to lift its cap.
	up := upstreamtest.HiddenPool(t, 20, 200*time.Millisecond)
	r, stop, done := launch(t, testConfig(t, "LOOMGATE_UPSTREAM="+up, "LOOMGATE_MODE=unbounded", "LOOMGATE_PROBE=on", "LOOMGATE_DRAIN_TIMEOUT=20s"),
		Options{Logger: slog.New(slog.DiscardHandler)})
	var wg sync.WaitGroup
	stopClients := make(chan struct{})
	closedLoop(r.URL+"/r", 150, stopClients, &wg)
	deadline := time.Now().Add(30 * time.Second)
	for r.Stats().Probe == 0 {
		if time.Now().After(deadline) {
			close(stopClients)
			wg.Wait()
			stop()
			<-done
			t.Fatal("no probe within 30 s of 150 clients on a pool of 20")
		}
		time.Sleep(20 * time.Millisecond)
	}
	capped := r.Stats()
	stop()
	lifted := time.Now().Add(time.Second)
	for r.Stats().Probe != 0 && time.Now().Before(lifted) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := r.Stats().Probe; p != 0 {
		t.Errorf("a probe's cap of %d still in force a second into the drain; want it lifted", p)
	}
	close(stopClients)
	if err := <-done; err != nil {
		t.Errorf("Run = %v; want a complete drain", err)
	}
	wg.Wait()
	t.Logf("capped at %d with %d queued when the drain began", capped.Probe, capped.Queued)
	for _, kind := range []string{"rejected_queue_timeout", "rejected_queue_full"} {
		if n := gathered(t, r.Sidecar, "loomgate_requests_total", kind); n != 0 {
			t.Errorf("loomgate_requests_total{outcome=%s} = %v; want none, the probe's waiters served", kind, n)
		}
	}
}
