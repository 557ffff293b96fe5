package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestAdvise(t *testing.T) {
	ms := time.Millisecond
	// The two experiments of the acceptance: a hidden pool of 50 behind
	// 200 clients, and WORKERS=20 in front of a free upstream.
	pool50 := Figures{Span: time.Minute, Requests: 30000, Throughput: 500, InFlight: 200, MeanService: 400 * ms,
		UnloadedService: 100 * ms, Capacity: 50, Saturated: true, QueueShare: 0}
	workers20 := Figures{Span: time.Minute, Requests: 12000, Throughput: 199, InFlight: 20, Queued: 180, MeanQueue: 900 * ms,
		MeanService: 101 * ms, UnloadedService: 100 * ms, Capacity: 20, QueueShare: 0.9}
	calm := Figures{Span: time.Minute, Requests: 6000, Throughput: 100, InFlight: 10, MeanQueue: ms / 10,
		MeanService: 100 * ms, UnloadedService: 99 * ms, Capacity: 9.9, QueueShare: 0.001}
	withMemory := func(f Figures, bpr float64) Figures { f.BytesPerRequest = bpr; return f }

	fixed20 := Settings{Mode: "fixed", Limit: 20, QueueLimit: 10000}
	fixed200 := Settings{Mode: "fixed", Limit: 200, QueueLimit: 10000}
	unbounded := Settings{Mode: "unbounded"}
	bulkhead20 := Settings{Mode: "unbounded", Limit: 20}
	budget := func(s Settings, b int64) Settings { s.MemoryBudgetBytes = b; return s }

	tests := []struct {
		name              string
		s                 Settings
		f                 Figures
		mode              string
		workers, bulkhead int
		summary           string // part of the summary
		reason            string // part of some reason; empty for none expected
		wantNoReasons     bool
	}{
		{name: "too little traffic", s: fixed20, f: Figures{Span: 20 * time.Second, Requests: 12}, mode: "fixed",
			summary: "Not enough traffic to advise yet: 12 requests finished in the last 20 s; the advice needs 100.", wantNoReasons: true},
		{name: "saturated upstream: cap at its capacity", s: unbounded, f: pool50, mode: "fixed", workers: 50, bulkhead: 50,
			summary: "more admission will not help. Cap admission at 50: LOOMGATE_MODE=fixed with LOOMGATE_WORKERS=50", reason: "sustains about 50 at once"},
		{name: "saturated behind a fixed pool too", s: fixed200, f: pool50, mode: "fixed", workers: 50, bulkhead: 50,
			summary: "LOOMGATE_MODE=unbounded with LOOMGATE_BULKHEAD=50 to fail fast", reason: "grown from 100 ms unloaded to 400 ms"},
		{name: "own queue dominates: raise the workers", s: fixed20, f: workers20, mode: "fixed", workers: 220,
			summary: "Raise LOOMGATE_WORKERS to 220 or switch to LOOMGATE_MODE=unbounded.", reason: "90% of their time in loomgate's queue"},
		{name: "bulkhead queue dominates: raise it", s: bulkhead20, f: workers20, mode: "unbounded", bulkhead: 220,
			summary: "Raise LOOMGATE_BULKHEAD to 220 or set it to 0", reason: "200 requests outstanding"},
		{name: "equivalent: keep the simpler", s: fixed200, f: calm, mode: "unbounded",
			summary: "modes are equivalent: keep the simpler one, LOOMGATE_MODE=unbounded", reason: "LOOMGATE_WORKERS=200 does not hold requests back"},
		{name: "equivalent, unbounded already", s: unbounded, f: calm, mode: "unbounded", summary: "keep the simpler one"},
		{name: "memory budget gives the bulkhead", s: budget(unbounded, 1<<30), f: withMemory(calm, 512<<10), mode: "unbounded", bulkhead: 2048,
			summary: "Keep at most 2048 in flight (LOOMGATE_BULKHEAD=2048", reason: "grows by 512 KiB per request in flight: LOOMGATE_MEMORY_BUDGET_BYTES=1.0 GiB holds 2048 requests"},
		{name: "memory caps the workers", s: budget(fixed20, 64<<20), f: withMemory(workers20, 512<<10), mode: "fixed", workers: 128,
			summary: "Raise LOOMGATE_WORKERS to 128, as far as the memory budget allows."},
		{name: "memory caps a saturated upstream's limit", s: budget(unbounded, 10<<20), f: withMemory(pool50, 512<<10), mode: "fixed", workers: 20, bulkhead: 20,
			summary: "Cap admission at 20"},
		{name: "memory above the capacity changes nothing", s: budget(unbounded, 1<<30), f: withMemory(pool50, 512<<10), mode: "fixed", workers: 50, bulkhead: 50,
			reason: "holds 2048 requests"},
		{name: "budget without bytes per request", s: budget(unbounded, 1<<30), f: calm, mode: "unbounded",
			reason: "set LOOMGATE_UPSTREAM_METRICS_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Advise(tt.s, tt.f)
			if r.Mode != tt.mode || r.Workers != tt.workers || r.Bulkhead != tt.bulkhead {
				t.Errorf("Advise = mode %s, workers %d, bulkhead %d; want %s, %d, %d\n%+v", r.Mode, r.Workers, r.Bulkhead, tt.mode, tt.workers, tt.bulkhead, r)
			}
			if !strings.Contains(r.Summary, tt.summary) {
				t.Errorf("Summary = %q; want it to contain %q", r.Summary, tt.summary)
			}
			if tt.reason != "" && !strings.Contains(strings.Join(r.Reasons, "\n"), tt.reason) {
				t.Errorf("Reasons = %q; want one containing %q", r.Reasons, tt.reason)
			}
			if tt.wantNoReasons && len(r.Reasons) > 0 {
				t.Errorf("Reasons = %q; want none", r.Reasons)
			}
		})
	}
}

func TestReadableUp(t *testing.T) {
	for _, tt := range []struct {
		x    float64
		want int
	}{
		{0, 0}, {0.2, 1}, {7, 7}, {45.2, 46}, {55.000000000000007, 55}, {99.5, 100},
		{200 * 1.1, 220}, {219.6, 220}, {221, 230}, {1234, 1300}, {10000, 10000},
	} {
		if got := readableUp(tt.x); got != tt.want {
			t.Errorf("readableUp(%v) = %d; want %d", tt.x, got, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		position int64
		limit    int
		service  time.Duration
		ceiling  time.Duration
		want     time.Duration
	}{
		{181, 20, 101 * ms, 30 * time.Second, time.Second},           // 0.91 s: at least 1
		{1000, 10, 150 * ms, 30 * time.Second, 15 * time.Second},     // exactly 15 s
		{1001, 10, 150 * ms, 30 * time.Second, 16 * time.Second},     // 15.015 s rounds up
		{10000, 20, time.Second, 30 * time.Second, 30 * time.Second}, // 500 s: at most the queue timeout
		{10000, 20, time.Second, 1500 * ms, 2 * time.Second},         // a ceiling rounds up to whole seconds
		{50, 20, time.Second, 0, time.Second},                        // no ceiling (fail fast): 1 s
		{50, 0, 100 * ms, 30 * time.Second, 5 * time.Second},         // no limit counts as 1
		{0, 20, time.Second, 30 * time.Second, time.Second},          // position below 1 counts as 1
		{5000, 20, 0, 30 * time.Second, time.Second},                 // no service time yet
		{1 << 40, 1, time.Hour, 24 * time.Hour, 24 * time.Hour},      // no overflow
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.position, tt.limit, tt.service, tt.ceiling); got != tt.want {
			t.Errorf("RetryAfter(%d, %d, %v, %v) = %v; want %v", tt.position, tt.limit, tt.service, tt.ceiling, got, tt.want)
		}
	}
}

func TestSnapshotText(t *testing.T) {
	ms := time.Millisecond
	s := Snapshot{
		Settings: Settings{Mode: "fixed", Limit: 20, QueueLimit: 10000},
		Figures: Figures{Span: time.Minute, Requests: 12000, Throughput: 199, ArrivalRate: 199, InFlight: 20, Queued: 180,
			MeanQueue: 900 * ms, QueueP99: 990 * ms, MeanService: 101 * ms, ServiceP99: 105 * ms, UnloadedService: 100 * ms,
			Capacity: 20, QueueShare: 0.9},
	}
	s.Recommendation = Advise(s.Settings, s.Figures)
	got := s.Text()
	for _, want := range []string{
		"Mode fixed, WORKERS=20, QUEUE_SIZE=10000.",
		"throughput 199 rps",
		"service 101 ms (unloaded 100 ms, p99 105 ms)",
		"20 in flight and 180 queued on average",
		"Upstream capacity about 20, not saturated.",
		"\n\nRaise LOOMGATE_WORKERS to 220 or switch to LOOMGATE_MODE=unbounded.\n",
		"- Requests spend 90% of their time in loomgate's queue",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Text() lacks %q:\n%s", want, got)
		}
	}
}

func ExampleAdvise() {
	// 200 clients in front of WORKERS=20 and a 100 ms service: the upstream
	// is fine, loomgate's own queue is the problem.
	r := Advise(
		Settings{Mode: "fixed", Limit: 20, QueueLimit: 10000},
		Figures{Span: time.Minute, Requests: 12000, Throughput: 199, InFlight: 20, Queued: 180,
			MeanQueue: 900 * time.Millisecond, MeanService: 101 * time.Millisecond,
			UnloadedService: 100 * time.Millisecond, Capacity: 20, QueueShare: 0.9},
	)
	fmt.Println(r.Summary)
	fmt.Println(r.Workers)
	// Output:
	// Raise LOOMGATE_WORKERS to 220 or switch to LOOMGATE_MODE=unbounded.
	// 220
}

func ExampleRetryAfter() {
	// 20 workers serving in 150 ms each, and the queue full: a request
	// would be 400th in line, and wait 400 × 150 ms ÷ 20 = 3 s.
	fmt.Println(RetryAfter(400, 20, 150*time.Millisecond, 30*time.Second))
	// Output: 3s
}
