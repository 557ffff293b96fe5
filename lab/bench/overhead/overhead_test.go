package overhead

import (
	"slices"
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

func us(n ...int) []time.Duration {
	ds := make([]time.Duration, len(n))
	for i, v := range n {
		ds[i] = time.Duration(v) * time.Microsecond
	}
	return ds
}

func TestRatioRange(t *testing.T) {
	for _, tc := range []struct {
		xs, refs []time.Duration
		want     string
	}{
		// Round by round: 30/20, 22/20, 24/20; the rounds' medians apart
		// (24 over 20) would agree here, not in general.
		{us(30, 22, 24), us(20, 20, 20), "1.20 (1.10–1.50)"},
		// A slow round slows both arms: its ratio stays in line.
		{us(20, 40, 21), us(10, 20, 10), "2.00 (2.00–2.10)"},
		{us(12, 12), us(10, 10), "1.20"},
		// Rounds the reference lacks are not paired.
		{us(12, 13, 50), us(10, 10), "1.30 (1.20–1.30)"},
		{us(12), nil, ""},
		// A round either arm lost (0) pairs nothing.
		{us(12, 0, 14), us(10, 10, 0), "1.20"},
		{us(12), us(0), ""},
	} {
		if got := ratioRange(tc.xs, tc.refs); got != tc.want {
			t.Errorf("ratioRange(%v, %v) = %q; want %q", tc.xs, tc.refs, got, tc.want)
		}
	}
}

func TestMedianAndRange(t *testing.T) {
	med, r := medianAndRange(us(30, 10, 20, 40))
	if med != 30*time.Microsecond || r != [2]time.Duration{10 * time.Microsecond, 40 * time.Microsecond} {
		t.Errorf("medianAndRange(30, 10, 20, 40) = %v, %v; want the upper median 30µs and 10µs–40µs", med, r)
	}
	if med, r := medianAndRange(us(0, 30, 10)); med != 30*time.Microsecond || r != [2]time.Duration{10 * time.Microsecond, 30 * time.Microsecond} {
		t.Errorf("medianAndRange(0, 30, 10) = %v, %v; want the lost round left out: 30µs, 10µs–30µs", med, r)
	}
	if med, r := medianAndRange(nil); med != 0 || r != [2]time.Duration{} {
		t.Errorf("medianAndRange(nil) = %v, %v; want zeros", med, r)
	}
}

func TestArmResult(t *testing.T) {
	a := &arm{row: Row{Name: "loomgate"}, samples: []sample{
		{cpu: 30 * time.Microsecond, rps: 300, p99: 9 * time.Millisecond, cpuAtRate: 50 * time.Microsecond, p99AtRate: 3 * time.Millisecond},
		{cpu: 10 * time.Microsecond, rps: 100, p99: 1 * time.Millisecond, cpuAtRate: 70 * time.Microsecond, p99AtRate: 1 * time.Millisecond},
		{cpu: 20 * time.Microsecond, rps: 200, p99: 5 * time.Millisecond, cpuAtRate: 60 * time.Microsecond, p99AtRate: 2 * time.Millisecond},
	}}
	r := a.result()
	if r.CPUPerRequest != 20*time.Microsecond || r.CPURange != [2]time.Duration{10 * time.Microsecond, 30 * time.Microsecond} ||
		r.RPS != 200 || r.P99 != 5*time.Millisecond || r.CPUAtRate != 60*time.Microsecond || r.P99AtRate != 2*time.Millisecond {
		t.Errorf("result() = %+v; want the medians 20µs (10–30), 200 rps, p99 5ms, 60µs, p99 2ms", r)
	}
	// The rounds stay in the order they ran, for the ratios round by round.
	if want := us(30, 10, 20); !slices.Equal(r.CPURounds, want) {
		t.Errorf("CPURounds = %v; want %v", r.CPURounds, want)
	}
}

func TestWriteMarkdown(t *testing.T) {
	res := Result{
		Config:  Config{Rounds: 6},
		Machine: "2 cores (test CPU)", Load: "wrk -t1", Placement: "each proxy alone on CPU 1", RigRPS: 50000, WrkRPS: 60000, StubRSS: 30 << 20,
		Rows: []Row{
			{Name: "direct", CPUPerRequest: 10 * time.Microsecond, CPURounds: us(10, 10, 10), CPUAtRate: 20 * time.Microsecond, CPUAtRateRounds: us(20, 20, 20),
				Latency: []LatencyPoint{{50, 100 * time.Millisecond, 102 * time.Millisecond}, {1000, 101 * time.Millisecond, 110 * time.Millisecond}}},
			{Name: "loomgate", CPUPerRequest: 24 * time.Microsecond, CPURange: [2]time.Duration{22 * time.Microsecond, 30 * time.Microsecond}, CPURounds: us(22, 24, 30),
				CPUAtRate: 60 * time.Microsecond, CPUAtRateRange: [2]time.Duration{60 * time.Microsecond, 60 * time.Microsecond}, CPUAtRateRounds: us(60, 60, 60),
				RSSUnbounded: 90 << 20, RSSFixed: 80 << 20, HeldUnbounded: 3990, HeldFixed: 200, Idle: 10 << 20,
				Latency: []LatencyPoint{{50, 101 * time.Millisecond, 104 * time.Millisecond}, {1000, 103 * time.Millisecond, 120 * time.Millisecond}}},
			{Name: "bare fasthttp", CPUPerRequest: 16 * time.Microsecond, CPURounds: us(16, 16, 16), CPUAtRate: 50 * time.Microsecond, CPUAtRateRounds: us(50, 50, 50),
				RSSUnbounded: 70 << 20, HeldUnbounded: 3990, Idle: 10 << 20,
				Latency: []LatencyPoint{{50, 101 * time.Millisecond, 103 * time.Millisecond}, {1000, 102 * time.Millisecond, 112 * time.Millisecond}}},
			{Name: "HAProxy", CPUPerRequest: 20 * time.Microsecond, CPURounds: us(20, 20, 20), CPUAtRate: 40 * time.Microsecond, CPUAtRateRounds: us(40, 40, 40),
				RSSUnbounded: 60 << 20, RSSFixed: 50 << 20, HeldUnbounded: 3990, HeldFixed: 200, Idle: 20 << 20,
				Latency: []LatencyPoint{{50, 101 * time.Millisecond, 103 * time.Millisecond}, {1000, 102 * time.Millisecond, 115 * time.Millisecond}}},
		},
		Procs: []Row{
			{Name: "loomgate, GOMAXPROCS=1", CPUPerRequest: 15 * time.Microsecond, CPURounds: us(15, 15), RPS: 40000, P99: 4 * time.Millisecond,
				CPUAtRate: 35 * time.Microsecond, CPUAtRateRounds: us(35, 35), P99AtRate: time.Millisecond},
			{Name: "HAProxy", CPUPerRequest: 10 * time.Microsecond, CPURounds: us(10, 10, 10), RPS: 60000, P99: 2 * time.Millisecond,
				CPUAtRate: 28 * time.Microsecond, CPUAtRateRounds: us(28, 0, 28), P99AtRate: time.Millisecond, LostAtRate: 1},
		},
		ProcsNotes: []string{"no CPU quota arm: create cgroup: permission denied"},
		Skipped:    []string{"nginx: not installed (Debian package nginx)"},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		// Memory per request: (90 - 10) MiB / 4000 = 20.5 KiB, HAProxy's
		// (60 - 20) MiB / 4000 = 10.2 KiB.
		"| loomgate | 24.0 µs (22.0–30.0) | 1.20 (1.10–1.50) | 1.50 (1.38–1.88) | 60.0 µs | 1.50 | 1.20 | 90.0 MiB (3990) | 20.5 KiB | 2.00 | 80.0 MiB (200) | 17.9 KiB | 2.33 | 1.00 ms | 2.00 ms | 2.00 ms | 10.00 ms |",
		"| direct | 10.0 µs | 0.50 | 0.62 | 20.0 µs | 0.50 | 0.40 |",
		"| bare fasthttp | 16.0 µs | 0.80 | 1.00 | 50.0 µs | 1.25 | 1.00 | 70.0 MiB (3990) | 15.4 KiB | 1.50 | no queue |",
		"On 2 cores (test CPU), each proxy alone on CPU 1; load from wrk -t1.", "the rig 50000 rps (83% of wrk)", "Skipped nginx: not installed",
		"### GOMAXPROCS",
		"| loomgate, GOMAXPROCS=1 | 15.0 µs | 1.50 | 40000 | 4.00 ms | 35.0 µs | 1.25 | 1.00 ms |",
		"No CPU quota arm: create cgroup: permission denied.",
		"three turns in a row (a machine busy with more than this run): HAProxy at 5000 rps 1 of 6.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
