package bench

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// t0 is an arbitrary origin for synthetic timelines.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// recorder is the tally's i-th recorder, made when first asked for.
func (t *tally) recorder(i int) *recorder {
	for len(t.recs) <= i {
		t.newRecorder()
	}
	return t.recs[i]
}

// recordKind records a closed-loop request, due when sent, that ended at
// done as k says.
func (r *recorder) recordKind(sent, done time.Time, k kind) {
	a := answer{retryAfter: -1}
	switch k {
	case kindOK:
		a.status = 200
	case kindStatus:
		a.status = 500
	case kindTimeout:
		a.err = fasthttp.ErrTimeout
	default:
		a.err = fasthttp.ErrConnectionClosed
	}
	r.record(sent, sent, done, a)
}

// inHistogram is d as the histogram reports it: the highest value
// equivalent to d at 3 significant digits.
func inHistogram(d time.Duration) time.Duration {
	h := newHistogram()
	h.RecordValue(d.Microseconds())
	return time.Duration(h.ValueAtPercentile(100)) * time.Microsecond
}

func TestInHistogram(t *testing.T) {
	// Below 2048 µs a 3-digit histogram is exact; above, within 0.1%.
	for _, d := range []time.Duration{time.Microsecond, 2047 * time.Microsecond, 200 * time.Millisecond, 2 * time.Second} {
		got := inHistogram(d)
		if got < d || float64(got-d) > 0.001*float64(d) {
			t.Errorf("inHistogram(%v) = %v; want within 0.1%% above", d, got)
		}
	}
	if got := inHistogram(1500 * time.Microsecond); got != 1500*time.Microsecond {
		t.Errorf("inHistogram(1.5ms) = %v; want exactly 1.5ms", got)
	}
}

func TestWindowContains(t *testing.T) {
	w := window{start: at(1000), end: at(6000)}
	tests := []struct {
		ms   float64
		want bool
	}{
		{999.999, false},
		{1000, true},
		{3000, true},
		{5999.999, true},
		{6000, false}, // cut at the window's end by the deadline
		{6001, false}, // 1 ms after the window
	}
	for _, tt := range tests {
		if got := w.contains(at(tt.ms)); got != tt.want {
			t.Errorf("window [1000 ms, 6000 ms).contains(%v ms) = %v; want %v", tt.ms, got, tt.want)
		}
	}
}

func TestWindowAccounting(t *testing.T) {
	// A 5 s window after a 1 s warm-up.
	tl := newTally(window{start: at(1000), end: at(6000)}, false, 1)
	r := tl.recorder(0)
	r.recordKind(at(0), at(200), kindOK)     // completes in the warm-up: out
	r.recordKind(at(900), at(1100), kindOK)  // sent in the warm-up, completes inside: in, 200 ms
	r.recordKind(at(5500), at(5999), kindOK) // completes just inside: in, 499 ms
	r.recordKind(at(5900), at(6001), kindOK) // completes 1 ms after the window: out
	r.recordKind(at(5900), at(6000), kindOK) // completes exactly at the end: out
	r.recordKind(at(3000), at(3100), kindStatus)
	r.recordKind(at(3000), at(4000), kindTimeout)
	r.recordKind(at(5000), at(6500), kindTimeout) // past the window: out
	r.recordKind(at(3000), at(3000.01), kindConnect)
	r.recordKind(at(500), at(900), kindConnect) // in the warm-up: out

	got := tl.result()
	want := Result{
		Window:   5 * time.Second,
		Requests: 2,
		RPS:      0.4,
		Mean:     (200 + 499) * time.Millisecond / 2,
		P50:      inHistogram(200 * time.Millisecond),
		// The histogram's bucket for 499 ms reaches above it; percentiles
		// are held to the exact maximum.
		P95:    499 * time.Millisecond,
		P99:    499 * time.Millisecond,
		Max:    499 * time.Millisecond,
		Errors: Errors{Status: 1, Timeout: 1, Connect: 1},
	}
	if got != want {
		t.Errorf("result =\n%+v\nwant\n%+v", got, want)
	}
	if ok, errs := tl.live(); ok != 5 || errs != 5 {
		t.Errorf("live() = %d ok, %d errors; want every completion, 5 and 5", ok, errs)
	}
}

func TestPercentilesMergedAcrossUsers(t *testing.T) {
	// 1..1000 ms in 1 µs steps would be slow; 1..2000 µs has exact buckets
	// in a 3-digit histogram, so the answers are known exactly.
	const users = 7
	tl := newTally(window{start: at(0), end: at(10_000)}, false, users)
	if len(tl.latency) >= users {
		t.Fatalf("%d shards for %d users; want users to share them", len(tl.latency), users)
	}
	for v := 1; v <= 2000; v++ {
		// Spread the values over the users so that each flushes several
		// full batches and a partial one.
		r := tl.recorder(v % users)
		r.recordKind(at(100), at(100).Add(time.Duration(v)*time.Microsecond), kindOK)
	}
	got := tl.result()
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	tests := []struct {
		name      string
		got, want time.Duration
	}{
		{"p50", got.P50, us(1000)},
		{"p95", got.P95, us(1900)},
		{"p99", got.P99, us(1980)},
		{"max", got.Max, us(2000)},
		{"mean", got.Mean, us(1001)}, // 1000.5 rounded half up
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s of 1..2000 µs over %d users = %v; want %v", tt.name, users, tt.got, tt.want)
		}
	}
	if got.Requests != 2000 || got.RPS != 200 {
		t.Errorf("requests, rps = %d, %v; want 2000, 200", got.Requests, got.RPS)
	}
}

func TestPercentilesNeverExceedMax(t *testing.T) {
	tl := newTally(window{start: at(0), end: at(10_000)}, false, 1)
	for range 100 {
		tl.recorder(0).recordKind(at(0), at(1000), kindOK) // 1 s, in a 1 ms-wide bucket
	}
	got := tl.result()
	if got.Max != time.Second || got.P50 != time.Second || got.P99 != time.Second {
		t.Errorf("p50/p99/max of a hundred 1 s requests = %v/%v/%v; want 1s each", got.P50, got.P99, got.Max)
	}
	if inHistogram(time.Second) <= time.Second {
		t.Errorf("inHistogram(1s) = %v; want the bucket's top, above 1s, for this test to mean something", inHistogram(time.Second))
	}
}

func TestPercentilesOfSkewedLatency(t *testing.T) {
	// 990 fast requests and 10 slow ones: the tail shows only from p99 up.
	tl := newTally(window{start: at(0), end: at(1000)}, false, 2)
	for i := range 1000 {
		d := 200 * time.Microsecond
		if i%100 == 99 {
			d = 1500 * time.Microsecond
		}
		tl.recorder(i%2).recordKind(at(10), at(10).Add(d), kindOK)
	}
	got := tl.result()
	if got.P50 != 200*time.Microsecond || got.P95 != 200*time.Microsecond || got.P99 != 200*time.Microsecond || got.Max != 1500*time.Microsecond {
		t.Errorf("p50/p95/p99/max = %v/%v/%v/%v; want 200µs/200µs/200µs/1.5ms", got.P50, got.P95, got.P99, got.Max)
	}
	if want := 213 * time.Microsecond; got.Mean != want {
		t.Errorf("mean = %v; want %v", got.Mean, want)
	}
}

func TestLatencyBeyondHistogramRange(t *testing.T) {
	tl := newTally(window{start: at(0), end: at(20 * 60_000)}, false, 1)
	tl.recorder(0).recordKind(at(0), at(10*60_000), kindOK) // 10 minutes
	got := tl.result()
	if got.Max != 10*time.Minute {
		t.Errorf("max = %v; want the exact 10m0s", got.Max)
	}
	if got.P99 < 4*time.Minute || got.P99 > 6*time.Minute {
		t.Errorf("p99 = %v; want it clamped near the histogram's 5 minutes", got.P99)
	}
}

func TestEmptyResult(t *testing.T) {
	got := newTally(window{start: at(0), end: at(1000)}, false, 3).result()
	if got.Requests != 0 || got.RPS != 0 || got.Mean != 0 || got.P99 != 0 || got.Window != time.Second {
		t.Errorf("result of no requests = %+v; want zeros over a 1s window", got)
	}
}

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}
	tests := []struct {
		err    error
		status int
		want   kind
	}{
		{nil, 200, kindOK},
		{nil, 204, kindOK},
		{nil, 302, kindStatus},
		{nil, 404, kindStatus},
		{nil, 503, kindStatus},
		{fasthttp.ErrTimeout, 0, kindTimeout},
		{fmt.Errorf("wrapped: %w", fasthttp.ErrTimeout), 0, kindTimeout},
		{readTimeout, 0, kindTimeout},
		{fasthttp.ErrDialTimeout, 0, kindConnect},
		{dialTimeout, 0, kindConnect},
		{refused, 0, kindConnect},
		{fasthttp.ErrConnectionClosed, 0, kindConnect},
		{errors.New("connection reset by peer"), 0, kindConnect},
	}
	for _, tt := range tests {
		if got := classify(tt.err, tt.status); got != tt.want {
			t.Errorf("classify(%v, %d) = %d; want %d", tt.err, tt.status, got, tt.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestFmtDur(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0 ms"},
		{3 * time.Microsecond, "0 ms"},
		{20 * time.Microsecond, "0.02 ms"},
		{450 * time.Microsecond, "0.45 ms"},
		{4512 * time.Microsecond, "4.51 ms"},
		{203 * time.Millisecond, "203 ms"},
		{2031 * time.Millisecond, "2.03 s"},
		{75 * time.Second, "75.0 s"},
	}
	for _, tt := range tests {
		if got := fmtDur(tt.d); got != tt.want {
			t.Errorf("fmtDur(%v) = %q; want %q", tt.d, got, tt.want)
		}
	}
}

// BenchmarkRecord is the per-request bookkeeping of a virtual user.
func BenchmarkRecord(b *testing.B) {
	tl := newTally(window{start: at(0), end: at(1e9)}, false, 1)
	r := tl.recorder(0)
	b.ReportAllocs()
	for b.Loop() {
		r.recordKind(at(10), at(210), kindOK)
	}
}
