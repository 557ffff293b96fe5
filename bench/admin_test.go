package bench

import (
	"errors"
	"fmt"
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
	want := sample{loomgate: true, queueSum: 1.5, queueCount: 10, serviceSum: 2.25, serviceCount: 11,
		inFlightPeak: 200, queuedPeak: 800, limit: 200, rss: 5e8}
	if s != want {
		t.Errorf("parseSample =\n%+v\nwant\n%+v", s, want)
	}
}

func TestParseSampleOtherExporters(t *testing.T) {
	tests := []struct {
		name string
		text string
		want sample
	}{
		{
			name: "a stub: memory only",
			text: "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1.2e+07\n# TYPE loomgate_stub_in_flight gauge\nloomgate_stub_in_flight 4\n",
			want: sample{rss: 1.2e7},
		},
		{
			name: "untyped histogram parts and labelled series, summed",
			text: "loomgate_service_seconds_sum{route=\"a\"} 1\nloomgate_service_seconds_sum{route=\"b\"} 2\nloomgate_service_seconds_count 6\nloomgate_queued 7\n",
			want: sample{loomgate: true, serviceSum: 3, serviceCount: 6, queuedPeak: 7},
		},
		{
			name: "NaN gauges read as zero",
			text: "process_resident_memory_bytes NaN\n",
			want: sample{},
		},
		{
			name: "nothing",
			text: "",
			want: sample{},
		},
	}
	for _, tt := range tests {
		got, err := parseSample(strings.NewReader(tt.text))
		if err != nil || got != tt.want {
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
	sp.add(sample{loomgate: true, queueSum: 100, queueCount: 1000, serviceSum: 200, serviceCount: 1000,
		inFlightPeak: 999, queuedPeak: 999, limit: 200, rss: 100 << 20})
	sp.add(sample{loomgate: true, queueSum: 150, queueCount: 1500, serviceSum: 300, serviceCount: 1500,
		inFlightPeak: 200, queuedPeak: 780, limit: 200, rss: 300 << 20})
	sp.add(sample{loomgate: true, queueSum: 4100, queueCount: 5000, serviceSum: 1215, serviceCount: 5000,
		inFlightPeak: 199, queuedPeak: 801, limit: 200, rss: 250 << 20})
	got := sp.stats()
	want := &SidecarStats{
		Loomgate:     true,
		QueueWait:    time.Second,               // (4100-100) s / 4000
		Service:      253750 * time.Microsecond, // (1215-200) s / 4000
		PeakInFlight: 200,
		PeakQueued:   801,
		Limit:        200,
		MemoryBytes:  300 << 20,
	}
	if *got != *want {
		t.Errorf("stats =\n%+v\nwant\n%+v", *got, *want)
	}
}

func TestSpanStatsEdgeCases(t *testing.T) {
	var one span
	one.add(sample{rss: 1})
	if st := one.stats(); st != nil {
		t.Errorf("stats of one sample = %+v; want nil", st)
	}

	var idle, restarted span
	idle.add(sample{loomgate: true, serviceSum: 5, serviceCount: 10})
	idle.add(sample{loomgate: true, serviceSum: 5, serviceCount: 10})
	restarted.add(sample{loomgate: true, serviceSum: 5, serviceCount: 10})
	restarted.add(sample{loomgate: true, serviceSum: 1, serviceCount: 2})
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
		sc, err := newScraper(tt.in)
		if err != nil || sc.url != tt.want {
			t.Errorf("newScraper(%q) = %v, %v; want url %q", tt.in, sc, err, tt.want)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:9090", "ftp://x/metrics", "http://"} {
		if _, err := newScraper(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("newScraper(%q) = %v; want ErrConfig", bad, err)
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
		sp.add(sample{})
		sp.add(s)
		st := sp.stats()
		if st.QueueWait < 0 || st.Service < 0 {
			t.Errorf("stats from %q = %+v; want no negative durations", text, st)
		}
	})
}
