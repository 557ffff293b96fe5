package bench

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

var inf = math.Inf(1)

func TestOpenHistogramQuantileInterpolatesAsPrometheus(t *testing.T) {
	bounds := []float64{0.1, 0.25, 0.5, 1, inf}
	for _, tt := range []struct {
		q      float64
		counts []float64
		want   float64
	}{
		// 100 observations, 90 under 0.1 s: p99 is in (0.5, 1], 9 of 10
		// of the way through its bucket.
		{0.99, []float64{90, 90, 90, 100, 100}, 0.5 + 0.5*0.9},
		{0.5, []float64{90, 90, 90, 100, 100}, 0.1 * 50 / 90},
		// The first bucket starts at 0.
		{0.99, []float64{10, 10, 10, 10, 10}, 0.099},
		// A rank in the +Inf bucket answers the highest finite bound.
		{0.99, []float64{10, 10, 10, 10, 20}, 1},
		// A rank on a bucket's top stops in that bucket.
		{0.5, []float64{50, 100, 100, 100, 100}, 0.1},
		// A decreasing count is raised to the one before it.
		{0.99, []float64{90, 80, 90, 100, 100}, 0.95},
		{0.99, []float64{0, 0, 0, 0, 0}, math.NaN()},
		{math.NaN(), []float64{1, 1, 1, 1, 1}, math.NaN()},
		{-1, []float64{1, 1, 1, 1, 1}, math.Inf(-1)},
		{2, []float64{1, 1, 1, 1, 1}, inf},
	} {
		got := histogramQuantile(tt.q, bounds, tt.counts)
		if !(got == tt.want || math.IsNaN(got) && math.IsNaN(tt.want) || math.Abs(got-tt.want) < 1e-12) {
			t.Errorf("histogramQuantile(%v, %v) = %v; want %v", tt.q, tt.counts, got, tt.want)
		}
	}
	if got := histogramQuantile(0.5, []float64{0.1, 0.25}, []float64{1, 2}); !math.IsNaN(got) {
		t.Errorf("without a +Inf bucket = %v; want NaN", got)
	}
	if got := histogramQuantile(0.5, []float64{-1, 1, inf}, []float64{5, 10, 10}); got != -1 {
		t.Errorf("rank in a first bucket with a bound below 0 = %v; want that bound", got)
	}
}

const openExposition = `# HELP loomgate_queue_wait_seconds Time from the request being read to its admission or rejection.
# TYPE loomgate_queue_wait_seconds histogram
loomgate_queue_wait_seconds_bucket{le="0.1"} %d
loomgate_queue_wait_seconds_bucket{le="0.25"} %d
loomgate_queue_wait_seconds_bucket{le="0.5"} %d
loomgate_queue_wait_seconds_bucket{le="1"} %d
loomgate_queue_wait_seconds_bucket{le="+Inf"} %d
loomgate_queue_wait_seconds_sum 0
loomgate_queue_wait_seconds_count %[5]d
# TYPE loomgate_requests_total counter
loomgate_requests_total{outcome="ok"} %[6]d
loomgate_requests_total{outcome="rejected_queue_timeout"} %[7]d
loomgate_requests_total{outcome="rejected_queue_full"} 0
# TYPE loomgate_queued gauge
loomgate_queued %[8]d
# TYPE loomgate_queued_max gauge
loomgate_queued_max %[9]d
# TYPE loomgate_in_flight gauge
loomgate_in_flight 200
# TYPE loomgate_in_flight_max gauge
loomgate_in_flight_max 200
# TYPE loomgate_limit gauge
loomgate_limit 200
`

func sampleAt(t *testing.T, at time.Duration, b [5]int, ok, timedOut, queued, queuedMax int) openSample {
	t.Helper()
	s, err := parseOpenSample(strings.NewReader(fmt.Sprintf(openExposition, b[0], b[1], b[2], b[3], b[4], ok, timedOut, queued, queuedMax)))
	if err != nil {
		t.Fatal(err)
	}
	s.at = at
	return s
}

func TestParseOpenSample(t *testing.T) {
	s := sampleAt(t, 0, [5]int{1, 2, 3, 4, 5}, 7, 8, 9, 10)
	if !s.loomgate || s.queued != 9 || s.queuedMax != 10 || s.inFlight != 200 || s.limit != 200 {
		t.Errorf("sample %+v; want loomgate's gauges", s)
	}
	if s.outcomes["ok"] != 7 || s.outcomes["rejected_queue_timeout"] != 8 || len(s.outcomes) != 3 {
		t.Errorf("outcomes %v", s.outcomes)
	}
	if fmt.Sprint(s.bounds) != "[0.1 0.25 0.5 1 +Inf]" || fmt.Sprint(s.cum) != "[1 2 3 4 5]" {
		t.Errorf("buckets %v %v", s.bounds, s.cum)
	}
	// A stub's /metrics is not a sidecar's.
	other, err := parseOpenSample(strings.NewReader("# TYPE loomgate_stub_in_flight gauge\nloomgate_stub_in_flight 3\n"))
	if err != nil || other.loomgate || other.bounds != nil {
		t.Errorf("a stub's metrics read as %+v, %v; want no sidecar", other, err)
	}
}

// The queue-time alert's expression over a queue that grows: readings every
// 250 ms, the p99 queue wait crossing 250 ms between the fourth and fifth.
func TestOpenStatsFollowsTheQueue(t *testing.T) {
	ms := time.Millisecond
	samples := []openSample{
		sampleAt(t, 0, [5]int{0, 0, 0, 0, 0}, 0, 0, 0, 0),
		// 100 fast.
		sampleAt(t, 250*ms, [5]int{100, 100, 100, 100, 100}, 100, 0, 10, 12),
		// p99 of 200: rank 198 in (0.1, 0.25], 98 of 100: 0.247 s.
		sampleAt(t, 500*ms, [5]int{100, 200, 200, 200, 200}, 200, 0, 40, 45),
		sampleAt(t, 750*ms, [5]int{100, 200, 200, 200, 200}, 200, 0, 80, 85),
		// 100 more in (0.25, 0.5]: rank 297 of 300, 97 of 100 of the way.
		sampleAt(t, time.Second, [5]int{100, 200, 300, 300, 300}, 300, 0, 120, 130),
		// 50 time out after a second.
		sampleAt(t, 1250*ms, [5]int{100, 200, 300, 300, 350}, 300, 50, 150, 160),
		sampleAt(t, 1500*ms, [5]int{100, 200, 300, 300, 350}, 300, 50, 0, 150),
	}
	st := openStats(samples, 250*ms, 1250*ms)
	if !st.Loomgate || st.Limit != 200 {
		t.Fatalf("stats %+v; want a sidecar with limit 200", st)
	}
	if st.QueuedStart != 10 || st.QueuedEnd != 150 || st.PeakQueued != 160 || st.PeakInFlight != 200 {
		t.Errorf("queued %d → %d, peak %d, in flight %d; want 10 → 150, 160, 200", st.QueuedStart, st.QueuedEnd, st.PeakQueued, st.PeakInFlight)
	}
	if len(st.Outcomes) != 2 || st.Outcomes["ok"] != 200 || st.Outcomes["rejected_queue_timeout"] != 50 || st.Rejected() != 50 {
		t.Errorf("outcomes %v, rejected %d; want 200 ok and 50 queue timeouts in the window", st.Outcomes, st.Rejected())
	}
	var p99 []string
	for _, p := range st.Timeline {
		p99 = append(p99, fmt.Sprint(p.QueueP99))
	}
	// 250 ms reading: all 100 in the first bucket, p99 0.099 s.
	if got, want := strings.Join(p99, " "), "0s 99ms 247ms 247ms 492.5ms 1s 1s"; got != want {
		t.Errorf("p99 per reading %s; want %s", got, want)
	}
	if !st.Alerted || st.AlertAt != time.Second || st.QueueP99Max != time.Second {
		t.Errorf("alert crossed %v at %v, p99 max %v; want at 1s, reaching 1s", st.Alerted, st.AlertAt, st.QueueP99Max)
	}
	if len(st.Timeline) != 7 || st.Timeline[4].Queued != 120 || st.Timeline[4].QueuedMax != 130 || st.Timeline[4].At != time.Second {
		t.Errorf("timeline %+v", st.Timeline)
	}
}

// The expression looks at the last minute only: a burst of slow waits
// long ago no longer counts.
func TestOpenAlertExprSlides(t *testing.T) {
	s := func(at time.Duration, slow, total int) openSample {
		return sampleAt(t, at, [5]int{total - slow, total - slow, total - slow, total, total}, 0, 0, 0, 0)
	}
	samples := []openSample{s(0, 0, 0), s(30*time.Second, 100, 100), s(61*time.Second, 100, 1100)}
	// At 61 s the range (1 s, 61 s] starts at the 30 s reading: 1000 new
	// fast waits and no slow one.
	if got := alertExpr(samples); math.Abs(got-0.099) > 1e-12 {
		t.Errorf("p99 over the last minute = %v; want 0.099", got)
	}
	if got := alertExpr(samples[:2]); math.Abs(got-0.995) > 1e-12 {
		t.Errorf("p99 at 30 s = %v; want 0.995", got)
	}
	if got := alertExpr(samples[:1]); !math.IsNaN(got) {
		t.Errorf("p99 of one reading = %v; want NaN: rate needs two", got)
	}
}
