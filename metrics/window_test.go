package metrics

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)

// phase is a synthetic steady load: every second from..to (in seconds
// after t0), perSecond requests finish, each having waited queue and been
// served for service; the sampler sees inFlight and queued every 250 ms.
type phase struct {
	from, to          int
	perSecond         int
	queue, service    time.Duration
	inFlight, queued  int64
	outcome           string
	notAdmittedPerSec int // rejected after waiting queue
}

// feed plays the phases into w. Requests finish in the middle of each
// second and samples fall in the middle of each quarter, so that no event
// sits on a bucket's edge and every expected figure is exact.
func feed(w *window, phases ...phase) {
	for _, p := range phases {
		outcome := p.outcome
		if outcome == "" {
			outcome = "ok"
		}
		for sec := p.from; sec < p.to; sec++ {
			for q := range 4 {
				at := t0.Add(time.Duration(sec)*time.Second + time.Duration(q)*250*time.Millisecond + 125*time.Millisecond)
				w.sample(at, p.inFlight, p.queued)
			}
			at := t0.Add(time.Duration(sec)*time.Second + 500*time.Millisecond)
			for range p.perSecond {
				w.record(at, &Sample{Outcome: outcome, UpstreamStatus: 200, Admission: true, Admitted: true,
					Queue: p.queue, Service: p.service, Total: p.queue + p.service})
			}
			for range p.notAdmittedPerSec {
				w.record(at, &Sample{Outcome: "rejected_queue_timeout", Admission: true, Queue: p.queue, Total: p.queue})
			}
		}
	}
}

func TestWindowSteadyLoad(t *testing.T) {
	w := newWindow(t0)
	feed(w, phase{from: 0, to: 60, perSecond: 20, queue: 900 * time.Millisecond, service: 100 * time.Millisecond, inFlight: 20, queued: 180})
	f := w.figures(t0.Add(60 * time.Second))
	// At 60 s the window is buckets 1 to 12: from 5 s, 55 s of traffic.
	want := Figures{
		Span:            55 * time.Second,
		Requests:        55 * 20,
		ArrivalRate:     20,
		Throughput:      20,
		InFlight:        20,
		Queued:          180,
		MeanQueue:       900 * time.Millisecond,
		MeanService:     100 * time.Millisecond,
		QueueP50:        constQuantile(900*time.Millisecond, 0.5), // interpolated in its bucket
		QueueP99:        constQuantile(900*time.Millisecond, 0.99),
		ServiceP50:      constQuantile(100*time.Millisecond, 0.5),
		ServiceP99:      constQuantile(100*time.Millisecond, 0.99),
		UnloadedService: 100 * time.Millisecond,
		QueueShare:      0.9,
		Capacity:        2, // 20 rps × 100 ms
	}
	checkFigures(t, f, want)
}

func TestWindowRotates(t *testing.T) {
	w := newWindow(t0)
	feed(w, phase{from: 0, to: 30, perSecond: 20, service: 100 * time.Millisecond, inFlight: 2})
	// Half a minute in, only the first phase: the span starts with the
	// traffic (the first sample of something in flight), not the window.
	span := 30*time.Second - 125*time.Millisecond
	checkFigures(t, w.figures(t0.Add(30*time.Second)), Figures{
		Span: span, Requests: 600, ArrivalRate: 600 / span.Seconds(), Throughput: 600 / span.Seconds(), InFlight: 2,
		MeanService: 100 * time.Millisecond, ServiceP50: constQuantile(100*time.Millisecond, 0.5), ServiceP99: constQuantile(100*time.Millisecond, 0.99),
		UnloadedService: 100 * time.Millisecond, Capacity: 600 / span.Seconds() * 0.1,
		QueueP50: 50 * time.Microsecond, QueueP99: 99 * time.Microsecond, // no wait: the first bucket, interpolated
	})
	second := phase{from: 30, to: 60, perSecond: 10, service: 400 * time.Millisecond, inFlight: 4}
	feed(w, second)
	// At 60 s the window holds 25 s of the first phase and 30 s of the
	// second.
	checkFigures(t, w.figures(t0.Add(60*time.Second)), Figures{
		Span: 55 * time.Second, Requests: 25*20 + 30*10,
		ArrivalRate: 800.0 / 55, Throughput: 800.0 / 55,
		InFlight:        (25*2 + 30*4) / 55.0,
		MeanService:     (25*20*100*time.Millisecond + 30*10*400*time.Millisecond) / 800,
		UnloadedService: 100 * time.Millisecond,
		Capacity:        800.0 / 55 * 0.1,
		// Half the window already shows the upstream holding four where it
		// sustains one.
		Saturated: true,
	}, "ServiceP50", "ServiceP99", "QueueP50", "QueueP99")
	second.from, second.to = 60, 300
	feed(w, second)
	// Four minutes on, the first phase has left the window but its
	// shortest service time is still the unloaded one, and the upstream,
	// holding four requests where it sustains one, is saturated.
	f := w.figures(t0.Add(300 * time.Second))
	checkFigures(t, f, Figures{
		Span: 55 * time.Second, Requests: 550, ArrivalRate: 10, Throughput: 10, InFlight: 4,
		MeanService: 400 * time.Millisecond, ServiceP50: constQuantile(400*time.Millisecond, 0.5), ServiceP99: constQuantile(400*time.Millisecond, 0.99),
		UnloadedService: 100 * time.Millisecond, Capacity: 1, Saturated: true,
	}, "QueueP50", "QueueP99")
	// Past the unloaded horizon, the 400 ms of the second phase are all the
	// window knows; with no traffic at all for a minute, nothing remains
	// but that minimum.
	idle := t0.Add(300*time.Second + UnloadedHorizon - 10*time.Second)
	checkFigures(t, w.figures(idle), Figures{UnloadedService: 400 * time.Millisecond, Span: 55 * time.Second})
	if h := w.history(idle); len(h) != WindowBuckets || h[0].Throughput != 0 {
		t.Errorf("history after an idle minute = %d buckets, first %+v; want %d empty ones", len(h), h[0], WindowBuckets)
	}
}

func TestWindowHistory(t *testing.T) {
	w := newWindow(t0)
	feed(w,
		phase{from: 2, to: 10, perSecond: 4, queue: 10 * time.Millisecond, service: 50 * time.Millisecond, inFlight: 1, queued: 3},
		phase{from: 10, to: 12, perSecond: 8, service: 20 * time.Millisecond, inFlight: 2},
	)
	h := w.history(t0.Add(12 * time.Second))
	first := t0.Add(2*time.Second + 125*time.Millisecond) // the first sample with a request in flight
	want := []BucketFigures{
		// [first, 5 s): three seconds' requests in 2.875 s.
		{Start: first, Span: t0.Add(5 * time.Second).Sub(first), Throughput: 12 / t0.Add(5*time.Second).Sub(first).Seconds(),
			MeanQueue: 10 * time.Millisecond, MeanService: 50 * time.Millisecond, InFlight: 1, Queued: 3},
		{Start: t0.Add(5 * time.Second), Span: BucketWidth, Throughput: 4, MeanQueue: 10 * time.Millisecond, MeanService: 50 * time.Millisecond, InFlight: 1, Queued: 3},
		// The current bucket, 2 s of 8 rps so far.
		{Start: t0.Add(10 * time.Second), Span: 2 * time.Second, Throughput: 8, MeanService: 20 * time.Millisecond, InFlight: 2},
	}
	if len(h) != len(want) {
		t.Fatalf("history = %d buckets %+v; want %d", len(h), h, len(want))
	}
	for i := range want {
		g, w := h[i], want[i]
		if !g.Start.Equal(w.Start) || g.Span != w.Span || !near(g.Throughput, w.Throughput) || g.MeanQueue != w.MeanQueue ||
			g.MeanService != w.MeanService || !near(g.InFlight, w.InFlight) || !near(g.Queued, w.Queued) {
			t.Errorf("history[%d] = %+v; want %+v", i, g, w)
		}
	}
}

func TestWindowIgnoresIdleBeforeTraffic(t *testing.T) {
	w := newWindow(t0)
	// The sampler runs from the start; only once something is in flight do
	// its samples count, and the rates are over the time since.
	for ms := 125; ms < 40_000; ms += 250 {
		w.sample(t0.Add(time.Duration(ms)*time.Millisecond), 0, 0)
	}
	feed(w, phase{from: 40, to: 50, perSecond: 10, service: 100 * time.Millisecond, inFlight: 1})
	f := w.figures(t0.Add(50 * time.Second))
	if want := 10*time.Second - 125*time.Millisecond; f.Span != want || !near(f.InFlight, 1) {
		t.Errorf("Span, InFlight = %v, %v; want %v, 1 (idle time left out)", f.Span, f.InFlight, want)
	}
}

func TestWindowOnlySuccessesSetUnloaded(t *testing.T) {
	w := newWindow(t0)
	feed(w,
		phase{from: 0, to: 10, perSecond: 20, service: 100 * time.Millisecond, inFlight: 2},
		phase{from: 10, to: 11, perSecond: 5, service: time.Millisecond, outcome: "upstream_error"},
	)
	w.record(t0.Add(11*time.Second), &Sample{Outcome: "ok", UpstreamStatus: 503, Admission: true, Admitted: true, Service: 2 * time.Millisecond})
	w.record(t0.Add(11*time.Second), &Sample{Outcome: "bad_request", Service: time.Millisecond})
	if f := w.figures(t0.Add(12 * time.Second)); f.UnloadedService != 100*time.Millisecond || f.Requests != 206 {
		t.Errorf("UnloadedService, Requests = %v, %d; want 100ms, 206 (quick failures are not the unloaded time; bad requests never met admission)",
			f.UnloadedService, f.Requests)
	}
}

func TestWindowRejections(t *testing.T) {
	w := newWindow(t0)
	feed(w, phase{from: 0, to: 10, perSecond: 10, queue: 3 * time.Second, service: time.Second, notAdmittedPerSec: 10, inFlight: 10, queued: 30})
	f := w.figures(t0.Add(10 * time.Second))
	// Rejected requests waited too: the queue's share counts their wait.
	if f.Rejected != 100 || f.Requests != 100 || !near(f.ArrivalRate, 2*f.Throughput) || !near(f.QueueShare, 6.0/7) || f.MeanQueue != 3*time.Second {
		t.Errorf("figures = %+v; want 100 rejected and 100 served, arrivals twice the throughput, queue share 6/7, mean queue 3s", f)
	}
}

func TestEstimate(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name          string
		f             Figures
		wantCapacity  float64
		wantSaturated bool
	}{
		{"hidden pool of 50 behind 200 clients", Figures{Requests: 30000, Throughput: 500, UnloadedService: 100 * ms, MeanService: 400 * ms, InFlight: 200}, 50, true},
		{"fixed 20 in front of a free upstream", Figures{Requests: 12000, Throughput: 200, UnloadedService: 100 * ms, MeanService: 101 * ms, InFlight: 20}, 20, false},
		{"slow minute: service up, in flight not", Figures{Requests: 1000, Throughput: 10, UnloadedService: 100 * ms, MeanService: 300 * ms, InFlight: 1.2}, 1, false},
		{"many in flight at the unloaded time", Figures{Requests: 1000, Throughput: 100, UnloadedService: 100 * ms, MeanService: 110 * ms, InFlight: 20}, 10, false},
		{"just below both thresholds", Figures{Requests: 1000, Throughput: 100, UnloadedService: 100 * ms, MeanService: 150 * ms, InFlight: 15}, 10, false},
		{"just above both thresholds", Figures{Requests: 1000, Throughput: 100, UnloadedService: 100 * ms, MeanService: 151 * ms, InFlight: 15.1}, 10, true},
		{"too few requests", Figures{Requests: MinRequests - 1, Throughput: 500, UnloadedService: 100 * ms, MeanService: 400 * ms, InFlight: 200}, 0, false},
		{"no unloaded time", Figures{Requests: 1000, Throughput: 500, MeanService: 400 * ms, InFlight: 200}, 0, false},
	}
	for _, tt := range tests {
		f := tt.f
		estimate(&f)
		if !near(f.Capacity, tt.wantCapacity) || f.Saturated != tt.wantSaturated {
			t.Errorf("%s: estimate = capacity %v, saturated %v; want %v, %v", tt.name, f.Capacity, f.Saturated, tt.wantCapacity, tt.wantSaturated)
		}
	}
}

// constQuantile is what the window reports as the q-quantile of requests
// that all took d: interpolated inside d's bucket.
func constQuantile(d time.Duration, q float64) time.Duration {
	i := bucketIndex(d)
	lower := 0.0
	if i > 0 {
		lower = windowBounds[i-1]
	}
	return seconds(lower + (windowBounds[i]-lower)*q)
}

// TestWindowQuantileResolution: whatever the latency, a quantile is off by
// at most one bucket (9%), where the classic buckets can be off by a third.
func TestWindowQuantileResolution(t *testing.T) {
	for _, d := range []time.Duration{150 * time.Microsecond, 3 * time.Millisecond, 101 * time.Millisecond, 200 * time.Millisecond, 999 * time.Millisecond, 29 * time.Second} {
		for _, q := range []float64{0.5, 0.99} {
			got := constQuantile(d, q)
			if off := math.Abs(float64(got-d)) / float64(d); off > 0.091 {
				t.Errorf("p%v of a steady %v reads %v, %.1f%% off; want within one bucket, 9%%", q*100, d, got, off*100)
			}
		}
	}
	for _, d := range []time.Duration{0, 50 * time.Microsecond, time.Millisecond, time.Minute, time.Hour} {
		i := bucketIndex(d)
		if i < len(windowBounds) && (d.Seconds() > windowBounds[i] || i > 0 && d.Seconds() <= windowBounds[i-1]) {
			t.Errorf("bucketIndex(%v) = %d, bounds (%v, %v]", d, i, windowBounds[max(i-1, 0)], windowBounds[i])
		}
	}
	if last := windowBounds[len(windowBounds)-1]; last < 60 {
		t.Errorf("highest bound %vs; want at least 60s", last)
	}
}

func TestQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	tests := []struct {
		q      float64
		counts []uint64
		want   float64
	}{
		{0.5, []uint64{10, 0, 0, 0}, 0.5},  // first bucket starts at 0
		{0.5, []uint64{0, 10, 0, 0}, 1.5},  // halfway through (1, 2]
		{0.25, []uint64{0, 0, 4, 0}, 2.5},  // a quarter through (2, 4]
		{0.995, []uint64{50, 49, 0, 1}, 4}, // the +Inf bucket answers the highest bound
		{0.99, []uint64{50, 49, 0, 1}, 2},  // but not a rank the bucket below reaches
		{0.75, []uint64{50, 0, 50, 0}, 3},  // empty buckets are skipped
		{0, []uint64{0, 0, 5, 0}, 2},       // q = 0: the lower edge of the first non-empty bucket
		{1, []uint64{1, 1, 0, 0}, 2},       // q = 1: the top of the last non-empty finite bucket
		{0.5, []uint64{0, 0, 0, 0}, math.NaN()},
	}
	for _, tt := range tests {
		got := quantile(tt.q, bounds, tt.counts)
		if !(near(got, tt.want) || math.IsNaN(got) && math.IsNaN(tt.want)) {
			t.Errorf("quantile(%v, %v, %v) = %v; want %v", tt.q, bounds, tt.counts, got, tt.want)
		}
	}
}

// TestMetricsWindowUnderSynctest runs the window as the sidecar does:
// Record on each request and Run sampling the state, in a bubble whose
// clock makes every figure exact.
func TestMetricsWindowUnderSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Ten workers each serving a 200 ms request, then the next, for
		// 30 s, with 40 more clients queued for 800 ms each: 50 rps.
		const inFlight, queued = 10, 40
		m, err := New(Config{
			Registerer: prometheus.NewRegistry(), Outcomes: testOutcomes, Mode: "fixed", Limit: 10, QueueLimit: 100,
			State:     func() State { return State{InFlight: inFlight, Queued: queued} },
			TakePeaks: func() (int64, int64, int64) { return 0, 0, 0 },
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()

		start := time.Now()
		for time.Since(start) < 30*time.Second {
			time.Sleep(200 * time.Millisecond)
			for range 10 {
				m.Record(Sample{Outcome: "ok", UpstreamStatus: 200, Admission: true, Admitted: true,
					Queue: 800 * time.Millisecond, Service: 200 * time.Millisecond, Total: time.Second})
			}
		}
		s := m.Snapshot()
		cancel()
		<-done
		f := s.Figures
		// The first request arrived a second before it finished, at
		// 200 ms: before the window began, which is where its span starts.
		if f.Span != 30*time.Second || f.Requests != 1500 || !near(f.InFlight, 10) || !near(f.Queued, 40) ||
			f.MeanService != 200*time.Millisecond || f.MeanQueue != 800*time.Millisecond || !near(f.QueueShare, 0.8) {
			t.Errorf("figures = %+v; want 30 s, 1500 requests, 10 in flight, 40 queued, 200 ms service, 800 ms queue, share 0.8", f)
		}
		if r := s.Recommendation; r.Mode != "fixed" || r.Workers != 55 {
			t.Errorf("recommendation = %+v; want fixed with 55 workers (50 outstanding + 10%%)", r)
		}
		if got := m.MeanService(); got != 200*time.Millisecond {
			t.Errorf("MeanService() = %v; want 200ms", got)
		}
	})
}

// checkFigures compares figures field by field, floats within a part in a
// million; skip names fields not to compare.
func checkFigures(t *testing.T, got, want Figures, skip ...string) {
	t.Helper()
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	check := func(name string, ok bool, g, w any) {
		t.Helper()
		if !skipped[name] && !ok {
			t.Errorf("%s = %v; want %v", name, g, w)
		}
	}
	check("Span", got.Span == want.Span, got.Span, want.Span)
	check("Requests", got.Requests == want.Requests, got.Requests, want.Requests)
	check("Rejected", got.Rejected == want.Rejected, got.Rejected, want.Rejected)
	check("ArrivalRate", near(got.ArrivalRate, want.ArrivalRate), got.ArrivalRate, want.ArrivalRate)
	check("Throughput", near(got.Throughput, want.Throughput), got.Throughput, want.Throughput)
	check("InFlight", near(got.InFlight, want.InFlight), got.InFlight, want.InFlight)
	check("Queued", near(got.Queued, want.Queued), got.Queued, want.Queued)
	check("MeanQueue", got.MeanQueue == want.MeanQueue, got.MeanQueue, want.MeanQueue)
	check("MeanService", got.MeanService == want.MeanService, got.MeanService, want.MeanService)
	check("QueueP50", nearDuration(got.QueueP50, want.QueueP50), got.QueueP50, want.QueueP50)
	check("QueueP99", nearDuration(got.QueueP99, want.QueueP99), got.QueueP99, want.QueueP99)
	check("ServiceP50", nearDuration(got.ServiceP50, want.ServiceP50), got.ServiceP50, want.ServiceP50)
	check("ServiceP99", nearDuration(got.ServiceP99, want.ServiceP99), got.ServiceP99, want.ServiceP99)
	check("UnloadedService", got.UnloadedService == want.UnloadedService, got.UnloadedService, want.UnloadedService)
	check("QueueShare", near(got.QueueShare, want.QueueShare), got.QueueShare, want.QueueShare)
	check("Capacity", near(got.Capacity, want.Capacity), got.Capacity, want.Capacity)
	check("Saturated", got.Saturated == want.Saturated, got.Saturated, want.Saturated)
}

func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b))
}

// nearDuration allows the nanosecond that float seconds lose.
func nearDuration(a, b time.Duration) bool {
	return a-b <= 1 && b-a <= 1
}

func TestWindowDropsEventsOlderThanItsSlot(t *testing.T) {
	w := newWindow(t0)
	feed(w, phase{from: 60, to: 61, perSecond: 10, service: 100 * time.Millisecond, inFlight: 1})
	// Stamped a whole window earlier, in the same slot: late, not current.
	w.record(t0.Add(500*time.Millisecond), &Sample{Outcome: "ok", UpstreamStatus: 200, Admission: true, Admitted: true, Service: time.Millisecond})
	w.sample(t0.Add(500*time.Millisecond), 99, 0)
	f := w.figures(t0.Add(61 * time.Second))
	if f.Requests != 10 || !near(f.InFlight, 1) || f.UnloadedService != 100*time.Millisecond {
		t.Errorf("Requests, InFlight, UnloadedService = %d, %v, %v; want 10, 1, 100ms: the late events dropped", f.Requests, f.InFlight, f.UnloadedService)
	}
}
