package overhead

import (
	"strings"
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	out := []byte(`Running 2s test @ http://127.0.0.1:8080/wait?ms=0
  2 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.71ms    2.10ms  40.02ms   90.10%
  Latency Distribution
     50%    1.16ms
     75%    1.90ms
     90%    3.20ms
     99%   12.50ms
  62511 requests in 2.00s, 9.12MB read
Requests/sec:  31255.50
`)
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.requests != 62511 || r.rps < 31255 || r.rps > 31256 {
		t.Errorf("requests %d, rps %.1f; want 62511 and 31255.5", r.requests, r.rps)
	}
	if r.p50 != 1160*time.Microsecond || r.p99 != 12500*time.Microsecond {
		t.Errorf("p50 %v, p99 %v; want 1.16ms and 12.5ms", r.p50, r.p99)
	}
	if _, err := parseWrk([]byte("unable to connect")); err == nil {
		t.Error("parseWrk of a failed run = nil error; want one")
	}
}

func TestWriteMarkdown(t *testing.T) {
	res := Result{
		Machine: "2 cores (test CPU)", Load: "wrk", RigRPS: 50000, WrkRPS: 60000, StubRSS: 30 << 20,
		Rows: []Row{
			{Name: "direct", CPUPerRequest: 10 * time.Microsecond, CPUAtRate: 20 * time.Microsecond, Latency: []LatencyPoint{{50, 100 * time.Millisecond, 102 * time.Millisecond}, {1000, 101 * time.Millisecond, 110 * time.Millisecond}}},
			{Name: "loomgate", CPUPerRequest: 24 * time.Microsecond, CPURange: [2]time.Duration{22 * time.Microsecond, 30 * time.Microsecond},
				CPUAtRate: 60 * time.Microsecond, CPUAtRateRange: [2]time.Duration{60 * time.Microsecond, 60 * time.Microsecond}, RSSUnbounded: 90 << 20, RSSFixed: 80 << 20, HeldUnbounded: 3990, HeldFixed: 200,
				Latency: []LatencyPoint{{50, 101 * time.Millisecond, 104 * time.Millisecond}, {1000, 103 * time.Millisecond, 120 * time.Millisecond}}},
			{Name: "bare fasthttp", CPUPerRequest: 16 * time.Microsecond, CPUAtRate: 50 * time.Microsecond, RSSUnbounded: 70 << 20, HeldUnbounded: 3990,
				Latency: []LatencyPoint{{50, 101 * time.Millisecond, 103 * time.Millisecond}, {1000, 102 * time.Millisecond, 112 * time.Millisecond}}},
			{Name: "HAProxy", CPUPerRequest: 20 * time.Microsecond, CPUAtRate: 40 * time.Microsecond, RSSUnbounded: 60 << 20, RSSFixed: 50 << 20, HeldUnbounded: 3990, HeldFixed: 200,
				Latency: []LatencyPoint{{50, 101 * time.Millisecond, 103 * time.Millisecond}, {1000, 102 * time.Millisecond, 115 * time.Millisecond}}},
		},
		Skipped: []string{"nginx: not installed (Debian package nginx)"},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| loomgate | 24.0 µs (22.0–30.0) | 1.20 | 1.50 | 60.0 µs | 1.50 | 1.20 | 90.0 MiB (3990) | 1.50 | 80.0 MiB (200) | 1.60 | 1.00 ms | 2.00 ms | 2.00 ms | 10.00 ms |",
		"| direct | 10.0 µs | 0.50 | 0.63 | 20.0 µs | 0.50 | 0.40 |",
		"| bare fasthttp | 16.0 µs | 0.80 | 1.00 | 50.0 µs | 1.25 | 1.00 | 70.0 MiB (3990) | 1.17 | no queue |",
		"2 cores (test CPU)", "the rig 50000 rps (83% of wrk)", "Skipped nginx: not installed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
