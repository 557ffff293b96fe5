package scrape

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// exposition is a sidecar's /metrics as the text format has it, with the
// cumulative values and gauges given.
func exposition(queueSum, queueCount, serviceSum, serviceCount float64, inFlightMax, queuedMax, limit, rss float64) string {
	return fmt.Sprintf(`# HELP loomgate_queue_wait_seconds Queue wait.
# TYPE loomgate_queue_wait_seconds histogram
loomgate_queue_wait_seconds_bucket{le="0.0001"} 0
loomgate_queue_wait_seconds_bucket{le="+Inf"} %[2]g
loomgate_queue_wait_seconds_sum %[1]g
loomgate_queue_wait_seconds_count %[2]g
# HELP loomgate_service_seconds Service time.
# TYPE loomgate_service_seconds histogram
loomgate_service_seconds_bucket{le="+Inf"} %[4]g
loomgate_service_seconds_sum %[3]g
loomgate_service_seconds_count %[4]g
# TYPE loomgate_in_flight gauge
loomgate_in_flight 3
# TYPE loomgate_in_flight_max gauge
loomgate_in_flight_max %[5]g
# TYPE loomgate_queued_max gauge
loomgate_queued_max %[6]g
# TYPE loomgate_limit gauge
loomgate_limit %[7]g
# TYPE loomgate_requests_total counter
loomgate_requests_total{outcome="ok"} 12
loomgate_requests_total{outcome="rejected_queue_full"} 1
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes %[8]g
`, queueSum, queueCount, serviceSum, serviceCount, inFlightMax, queuedMax, limit, rss)
}

func TestParseSample(t *testing.T) {
	s, err := parseSample(strings.NewReader(exposition(1.5, 10, 2.25, 11, 200, 800, 200, 5e8)))
	if err != nil {
		t.Fatalf("parseSample = %v", err)
	}
	want := Sample{loomgate: true, queueSum: 1.5, queueCount: 10, serviceSum: 2.25, serviceCount: 11,
		inFlight: 3, inFlightMax: 200, queuedMax: 800, limit: 200, rss: 5e8,
		outcomes: map[string]float64{"ok": 12, "rejected_queue_full": 1},
		bounds:   []float64{0.0001, math.Inf(1)}, cum: []float64{0, 10}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("parseSample =\n%+v\nwant\n%+v", s, want)
	}
}

func TestParseSampleOtherExporters(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Sample
	}{
		{
			name: "a stub: memory only",
			text: "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1.2e+07\n# TYPE loomgate_stub_in_flight gauge\nloomgate_stub_in_flight 4\n",
			want: Sample{rss: 1.2e7},
		},
		{
			name: "untyped histogram parts and labelled series, summed",
			text: "loomgate_service_seconds_sum{route=\"a\"} 1\nloomgate_service_seconds_sum{route=\"b\"} 2\nloomgate_service_seconds_count 6\nloomgate_queued 7\n",
			want: Sample{loomgate: true, serviceSum: 3, serviceCount: 6, queued: 7, queuedMax: 7},
		},
		{
			name: "NaN gauges read as zero",
			text: "process_resident_memory_bytes NaN\n",
			want: Sample{},
		},
		{
			name: "nothing",
			text: "",
			want: Sample{},
		},
	}
	for _, tt := range tests {
		got, err := parseSample(strings.NewReader(tt.text))
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: parseSample = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestParseSampleRejectsGarbage(t *testing.T) {
	if _, err := parseSample(strings.NewReader("<html>not metrics</html>\n")); err == nil {
		t.Errorf("parseSample(html) = nil error; want one")
	}
}

func TestSpanStats(t *testing.T) {
	var sp span
	// Baseline at the window's start: its peaks cover the warm-up and
	// must not count.
	sp.add(Sample{loomgate: true, queueSum: 100, queueCount: 1000, serviceSum: 200, serviceCount: 1000,
		inFlightMax: 999, queuedMax: 999, limit: 200, rss: 100 << 20,
		cpu: 10, outcomes: map[string]float64{"ok": 1000}})
	sp.add(Sample{loomgate: true, queueSum: 150, queueCount: 1500, serviceSum: 300, serviceCount: 1500,
		inFlightMax: 200, queuedMax: 780, limit: 200, rss: 300 << 20,
		cpu: 10.02, outcomes: map[string]float64{"ok": 1500}})
	sp.add(Sample{loomgate: true, queueSum: 4100, queueCount: 5000, serviceSum: 1215, serviceCount: 5000,
		inFlightMax: 199, queuedMax: 801, limit: 200, rss: 250 << 20,
		cpu: 10.25, outcomes: map[string]float64{"ok": 5000, "rejected_queue_full": 1000}})
	got := sp.stats()
	want := &SidecarStats{
		Loomgate:     true,
		QueueWait:    time.Second,               // (4100-100) s / 4000
		Service:      253750 * time.Microsecond, // (1215-200) s / 4000
		PeakInFlight: 200,
		PeakQueued:   801,
		Limit:        200,
		MemoryBytes:  300 << 20,
		// 0.25 s of CPU over 4000 answered and 1000 rejected.
		CPUPerRequest: 50 * time.Microsecond,
	}
	if *got != *want {
		t.Errorf("stats =\n%+v\nwant\n%+v", *got, *want)
	}
}

func TestSpanStatsEdgeCases(t *testing.T) {
	var one span
	one.add(Sample{rss: 1})
	if st := one.stats(); st != nil {
		t.Errorf("stats of one Sample = %+v; want nil", st)
	}

	var idle, restarted span
	idle.add(Sample{loomgate: true, serviceSum: 5, serviceCount: 10})
	idle.add(Sample{loomgate: true, serviceSum: 5, serviceCount: 10})
	restarted.add(Sample{loomgate: true, serviceSum: 5, serviceCount: 10})
	restarted.add(Sample{loomgate: true, serviceSum: 1, serviceCount: 2})
	for name, sp := range map[string]*span{"idle": &idle, "restarted": &restarted} {
		if st := sp.stats(); st.Service != 0 || st.QueueWait != 0 {
			t.Errorf("%s: stats = %+v; want zero means", name, st)
		}
	}
}

func TestNewScraper(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"http://127.0.0.1:9090", "http://127.0.0.1:9090/metrics"},
		{"http://127.0.0.1:9090/", "http://127.0.0.1:9090/metrics"},
		{"http://127.0.0.1:9090/metrics", "http://127.0.0.1:9090/metrics"},
		{"http://localhost:9090/custom/metrics?x=1", "http://localhost:9090/custom/metrics?x=1"},
	}
	for _, tt := range tests {
		sc, err := New(tt.in)
		if err != nil || sc.url != tt.want {
			t.Errorf("New(%q) = %v, %v; want url %q", tt.in, sc, err, tt.want)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:9090", "ftp://x/metrics", "http://"} {
		if _, err := New(bad); !errors.Is(err, ErrAdminURL) {
			t.Errorf("New(%q) = %v; want ErrAdminURL", bad, err)
		}
	}
}

// FuzzParseSample feeds arbitrary text, as any endpoint a user points
// --admin at may answer, to the metrics reader.
func FuzzParseSample(f *testing.F) {
	f.Add(exposition(1, 2, 3, 4, 5, 6, 7, 8))
	f.Add("loomgate_service_seconds_sum 1\nloomgate_service_seconds_count 0\n")
	f.Add("# TYPE x summary\nx{quantile=\"0.5\"} 1\nx_sum 2\nx_count 3\n")
	f.Add("process_resident_memory_bytes +Inf\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := parseSample(strings.NewReader(text))
		if err != nil {
			return
		}
		var sp span
		sp.add(Sample{})
		sp.add(s)
		st := sp.stats()
		if st.QueueWait < 0 || st.Service < 0 {
			t.Errorf("stats from %q = %+v; want no negative durations", text, st)
		}
	})
}

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

func sampleAt(t *testing.T, at time.Duration, b [5]int, ok, timedOut, queued, queuedMax int) Sample {
	t.Helper()
	s, err := parseSample(strings.NewReader(fmt.Sprintf(openExposition, b[0], b[1], b[2], b[3], b[4], ok, timedOut, queued, queuedMax)))
	if err != nil {
		t.Fatal(err)
	}
	s.at = at
	return s
}

func TestParseSampleOfAnOpenLoopRun(t *testing.T) {
	s := sampleAt(t, 0, [5]int{1, 2, 3, 4, 5}, 7, 8, 9, 10)
	if !s.loomgate || s.queued != 9 || s.queuedMax != 10 || s.inFlight != 200 || s.limit != 200 {
		t.Errorf("Sample %+v; want loomgate's gauges", s)
	}
	if s.outcomes["ok"] != 7 || s.outcomes["rejected_queue_timeout"] != 8 || len(s.outcomes) != 3 {
		t.Errorf("outcomes %v", s.outcomes)
	}
	if fmt.Sprint(s.bounds) != "[0.1 0.25 0.5 1 +Inf]" || fmt.Sprint(s.cum) != "[1 2 3 4 5]" {
		t.Errorf("buckets %v %v", s.bounds, s.cum)
	}
	// A stub's /metrics is not a sidecar's.
	other, err := parseSample(strings.NewReader("# TYPE loomgate_stub_in_flight gauge\nloomgate_stub_in_flight 3\n"))
	if err != nil || other.loomgate || other.bounds != nil {
		t.Errorf("a stub's metrics read as %+v, %v; want no sidecar", other, err)
	}
}

// The queue-time alert's expression over a queue that grows: readings every
// 250 ms, the p99 queue wait crossing 250 ms between the fourth and fifth.
func TestOpenStatsFollowsTheQueue(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
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
	s := func(at time.Duration, slow, total int) Sample {
		return sampleAt(t, at, [5]int{total - slow, total - slow, total - slow, total, total}, 0, 0, 0, 0)
	}
	samples := []Sample{s(0, 0, 0), s(30*time.Second, 100, 100), s(61*time.Second, 100, 1100)}
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
