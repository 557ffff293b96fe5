package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/stub"
	"github.com/loomgate/loomgate/lab/stub/stubtest"
	"github.com/valyala/fasthttp"
)

// startHanging serves 200s from a handler that blocks until the test ends,
// and counts the requests it received.
func startHanging(t *testing.T) (string, func() int) {
	t.Helper()
	release := make(chan struct{})
	var mu sync.Mutex
	n := 0
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		n++
		mu.Unlock()
		<-release
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		close(release)
		srv.Shutdown()
	})
	return "http://" + ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestRunClosedLoopAgainstStub(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	var progress bytes.Buffer
	res, err := Run(context.Background(), Config{
		URL:         base + "/wait?ms=50",
		Concurrency: 4,
		Warmup:      300 * time.Millisecond,
		Window:      time.Second,
		AdminURL:    base, // the stub's own /metrics: memory, no sidecar series
		Progress:    &progress,
		Label:       "[1/1] e2e",
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Theory: 4 users / 0.05 s = 80 rps. The margins allow a loaded
	// machine and the race detector, not a broken loop.
	if res.RPS < 60 || res.RPS > 90 {
		t.Errorf("rps = %.1f; want 60..90 (4 users / 50 ms = 80)", res.RPS)
	}
	if res.Errors.Total() != 0 {
		t.Errorf("errors = %+v; want none", res.Errors)
	}
	if res.P50 < 50*time.Millisecond || res.Mean < 50*time.Millisecond || res.Max < res.P99 || res.P99 < res.P50 {
		t.Errorf("latencies mean %v p50 %v p99 %v max %v; want at least 50ms, ordered", res.Mean, res.P50, res.P99, res.Max)
	}
	if res.Window != time.Second || res.Concurrency != 4 || res.Requests != int64(res.RPS) {
		t.Errorf("window %v, c %d, requests %d at %.1f rps; want 1s, 4, consistent", res.Window, res.Concurrency, res.Requests, res.RPS)
	}
	if res.Physics.Flagged {
		t.Errorf("physics flagged a plain closed loop: %s", res.Physics.Reason)
	}
	if sc := res.Sidecar; sc == nil || sc.Loomgate || sc.MemoryBytes <= 0 {
		t.Errorf("sidecar stats from a stub's /metrics = %+v; want memory only", sc)
	}
	for _, want := range []string{"[1/1] e2e: 4 users on " + base + "/wait?ms=50, warm-up 300ms, window 1s\n", " rps, mean ", " 0 errors"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
}

func TestRunReadsUpstreamMemory(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	run := func(rss func() (int64, error)) (Result, string) {
		t.Helper()
		var progress bytes.Buffer
		res, err := Run(context.Background(), Config{
			URL: base + "/wait?ms=10", Concurrency: 2, Warmup: 100 * time.Millisecond, Window: 800 * time.Millisecond,
			UpstreamRSS: rss, Progress: &progress, Label: "up",
		})
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		return res, progress.String()
	}

	// Readings that rise and fall: the peak is kept, whenever it came.
	var mu sync.Mutex
	var calls int
	readings := []int64{10 << 20, 30 << 20, 20 << 20}
	res, _ := run(func() (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return readings[min(calls, len(readings))-1], nil
	})
	// When the window opens, at 250 ms, 500 ms and when it closes.
	if calls < 3 {
		t.Errorf("upstream memory read %d times in an 800 ms window; want it read when the window opens, during it and when it closes", calls)
	}
	if res.UpstreamMemoryBytes != 30<<20 {
		t.Errorf("UpstreamMemoryBytes = %d; want the highest reading, %d", res.UpstreamMemoryBytes, 30<<20)
	}

	// A real process: this one.
	if res, _ := run(func() (int64, error) { return ResidentBytes(os.Getpid()) }); res.UpstreamMemoryBytes <= 0 {
		t.Errorf("UpstreamMemoryBytes of this process = %d; want its resident memory", res.UpstreamMemoryBytes)
	}

	// A process that is gone: unknown, and said.
	res, progress := run(func() (int64, error) { return 0, errors.New("no such process") })
	if res.UpstreamMemoryBytes != 0 || !strings.Contains(progress, "up: reading the upstream's memory: no such process") {
		t.Errorf("UpstreamMemoryBytes = %d with a reader that fails, progress:\n%s\nwant 0, and the error in the progress", res.UpstreamMemoryBytes, progress)
	}

	// Without a reader, unknown.
	if res, _ := run(nil); res.UpstreamMemoryBytes != 0 {
		t.Errorf("UpstreamMemoryBytes = %d without a reader; want 0", res.UpstreamMemoryBytes)
	}
}

func TestRunCountsTimeouts(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	res, err := Run(context.Background(), Config{
		URL: base + "/wait?ms=1000", Concurrency: 2, Window: time.Second, Timeout: 150 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if res.Requests != 0 || res.Errors.Timeout < 2 || res.Errors.Status != 0 {
		t.Errorf("a 1 s endpoint with a 150 ms timeout: %d successes, errors %+v; want none and several timeouts", res.Requests, res.Errors)
	}
	if !res.Physics.Flagged {
		t.Errorf("physics did not flag a row with no success")
	}
}

func TestRunCountsStatusErrors(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	res, err := Run(context.Background(), Config{URL: base + "/wait?ms=bad", Concurrency: 2, Window: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if res.Requests != 0 || res.Errors.Status == 0 || res.Errors.Timeout+res.Errors.Connect != 0 {
		t.Errorf("400s counted as %d successes, errors %+v; want status errors only", res.Requests, res.Errors)
	}
}

func TestRunStopsAtWindowEnd(t *testing.T) {
	url, received := startHanging(t)
	begin := time.Now()
	res, err := Run(context.Background(), Config{URL: url, Concurrency: 3, Window: 500 * time.Millisecond, Timeout: time.Minute})
	took := time.Since(begin)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Requests in flight at the window's end are cut there: not counted,
	// not errors, and not waited for until the one-minute timeout.
	if took > 10*time.Second {
		t.Errorf("Run took %v against a server that never answers; want it to stop at the 500ms window's end", took)
	}
	if res.Requests != 0 || res.Errors.Total() != 0 {
		t.Errorf("requests cut at the window's end counted as %d successes, errors %+v; want nothing", res.Requests, res.Errors)
	}
	if n := received(); n != 3 {
		t.Errorf("server received %d requests; want 3, one per virtual user", n)
	}
}

func TestRunAbandonedPromptly(t *testing.T) {
	url, _ := startHanging(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	begin := time.Now()
	_, err := Run(ctx, Config{URL: url, Concurrency: 2, Window: time.Minute, Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run cancelled = %v; want context.Canceled", err)
	}
	if took := time.Since(begin); took > 20*time.Second {
		t.Errorf("Run took %v after its context was cancelled at 200ms; want it to close its connections and return", took)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "http://127.0.0.1:1/", Concurrency: 0}, "Concurrency 0"},
		{Config{URL: "127.0.0.1:8080/x", Concurrency: 1}, "want an http:// or https:// URL"},
		{Config{URL: "ftp://127.0.0.1/", Concurrency: 1}, "want an http:// or https:// URL"},
		{Config{URL: "http:///x", Concurrency: 1}, "no host"},
		{Config{URL: "http://127.0.0.1:1/", Concurrency: 1, Window: -time.Second}, "none may be negative"},
	}
	for _, tt := range tests {
		_, err := Run(context.Background(), tt.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%+v) = %v; want ErrConfig naming %q", tt.cfg, err, tt.want)
		}
	}
}

func TestRunUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = Run(context.Background(), Config{URL: "http://" + addr + "/", Concurrency: 1, Window: time.Second})
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("Run against a closed port = %v; want ErrUnreachable", err)
	}
}

func TestRunBadAdmin(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	for _, admin := range []string{base + "/wait?ms=0", "localhost:9090"} {
		_, err := Run(context.Background(), Config{URL: base + "/wait?ms=0", Concurrency: 1, Window: time.Second, AdminURL: admin})
		if !errors.Is(err, ErrAdmin) && !errors.Is(err, ErrConfig) {
			t.Errorf("Run with AdminURL %q = %v; want ErrAdmin or ErrConfig before any load", admin, err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		url, addr, label string
		tls              bool
	}{
		{"http://127.0.0.1:8080/wait?ms=200", "127.0.0.1:8080", "127.0.0.1:8080/wait?ms=200", false},
		{"http://localhost/", "localhost:80", "localhost/", false},
		{"https://example.test/x", "example.test:443", "example.test/x", true},
		{"http://[::1]:9000", "[::1]:9000", "[::1]:9000/", false},
	}
	for _, tt := range tests {
		got, err := parseTarget(tt.url)
		if err != nil || got.addr != tt.addr || got.label != tt.label || got.tls != tt.tls {
			t.Errorf("parseTarget(%q) = %+v, %v; want addr %q, label %q, tls %v", tt.url, got, err, tt.addr, tt.label, tt.tls)
		}
	}
}

// closedEngine is an engine for a closed loop of users clients on tgt,
// its window open from now to end, for the benchmarks to drive by hand.
func closedEngine(tgt target, users int, end time.Time) *engine {
	win := window{start: time.Now(), end: end}
	return &engine{
		lv: level{timeout: 10 * time.Second}, tgt: tgt, begin: win.start, win: win, hardEnd: end,
		tally: newTally(win, false, users), conns: &connSet{open: map[*trackedConn]struct{}{}},
	}
}

// BenchmarkWorkerOnce is the client's hot loop against the stub's
// /wait?ms=0 on loopback: one request, its timing and its bookkeeping.
// Allocations here would be paid several thousand times a second at c1000.
func BenchmarkWorkerOnce(b *testing.B) {
	base := stubtest.Start(b, stub.Config{})
	tgt, err := parseTarget(base + "/wait?ms=0")
	if err != nil {
		b.Fatal(err)
	}
	e := closedEngine(tgt, 1, time.Now().Add(time.Hour))
	send, rec := e.sender(e.newClient(1), tgt.raw), e.tally.newRecorder()
	closedOnce(e, send, rec, 0) // open the connection outside the measurement
	b.ReportAllocs()
	for b.Loop() {
		closedOnce(e, send, rec, 0)
	}
	b.StopTimer()
	if res := e.tally.result(); res.Errors.Total() != 0 {
		b.Fatalf("errors %+v", res.Errors)
	}
}

// BenchmarkClosedLoop is 64 virtual users against /wait?ms=0, the rig's
// and the stub's cost together; req/s is what one process reaches.
func BenchmarkClosedLoop(b *testing.B) {
	base := stubtest.Start(b, stub.Config{})
	tgt, err := parseTarget(base + "/wait?ms=0")
	if err != nil {
		b.Fatal(err)
	}
	const users = 64
	e := closedEngine(tgt, users, time.Now().Add(time.Hour))
	type user struct {
		send func(time.Time) answer
		rec  *recorder
	}
	clients := make([]user, users)
	for i := range clients {
		clients[i] = user{e.sender(e.newClient(1), tgt.raw), e.tally.newRecorder()}
		closedOnce(e, clients[i].send, clients[i].rec, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	begin := time.Now()
	var wg sync.WaitGroup
	for i, u := range clients {
		n := b.N / users
		if i < b.N%users {
			n++
		}
		wg.Go(func() {
			for range n {
				closedOnce(e, u.send, u.rec, 0)
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(begin).Seconds(), "req/s")
}

func TestOpenRateAgainstStub(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	var progress bytes.Buffer
	res, err := RunOpen(context.Background(), OpenConfig{
		URL: base + "/wait?ms=1", Rate: 200, Warmup: 200 * time.Millisecond, Window: 2 * time.Second,
		AdminURL: base, // the stub's own /metrics: no sidecar series
		Progress: &progress, Label: "[1/1] open",
	})
	if err != nil {
		t.Fatalf("RunOpen = %v", err)
	}
	// 5% holds on two shared cores under the race detector; a pacer that
	// drifts or waits for answers misses it.
	if off := res.SendRate/200 - 1; math.Abs(off) > 0.05 {
		t.Errorf("sent %.1f/s; want 200 within 5%%", res.SendRate)
	}
	if off := res.Throughput/200 - 1; math.Abs(off) > 0.05 {
		t.Errorf("2xx %.1f/s; want 200 within 5%%", res.Throughput)
	}
	if res.Due != 400 || res.Counts.OK != res.Due || res.Counts.Total() != res.Due {
		t.Errorf("due %d, counts %+v; want 400, all 2xx", res.Due, res.Counts)
	}
	if res.P50 < time.Millisecond || res.Max < res.P99 || res.P99 < res.P90 || res.P90 < res.P50 {
		t.Errorf("latency p50 %v p90 %v p99 %v max %v; want at least 1 ms, ordered", res.P50, res.P90, res.P99, res.Max)
	}
	if res.Arm != strings.TrimPrefix(base, "http://")+"/wait?ms=1" || res.Rate != 200 || res.Window != 2*time.Second {
		t.Errorf("arm %q, rate %v, window %v", res.Arm, res.Rate, res.Window)
	}
	if sc := res.Sidecar; sc == nil || sc.Loomgate || len(sc.Timeline) != 0 {
		t.Errorf("sidecar from a stub's /metrics = %+v; want read, and no sidecar in it", sc)
	}
	for _, want := range []string{"[1/1] open: 200 rps on " + base + "/wait?ms=1, at most ", "window 1s/2s, sent ", "[1/1] open: sent "} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
}

// startStalling serves 200s, but holds every request that arrives before
// release until then.
func startStalling(t *testing.T, release time.Time) (string, func() int64) {
	t.Helper()
	var n atomic.Int64
	done := make(chan struct{})
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		n.Add(1)
		if d := time.Until(release); d > 0 {
			select {
			case <-time.After(d):
			case <-done:
			}
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		close(done)
		srv.Shutdown()
	})
	return "http://" + ln.Addr().String(), n.Load
}

// A closed loop would show a one-second stall as one slow request per
// user; the open loop keeps sending, and every request due during the
// stall is late by the rest of it.
func TestOpenStalledUpstreamOverLoopback(t *testing.T) {
	url, _ := startStalling(t, time.Now().Add(time.Second))
	res, err := RunOpen(context.Background(), OpenConfig{URL: url, Rate: 200, Window: 2 * time.Second})
	if err != nil {
		t.Fatalf("RunOpen = %v", err)
	}
	// Due 0..1 s, answered at 1 s: latencies spread from 1 s down to 0,
	// half the requests. The 90th percentile is 0.8 s.
	if res.P90 < 600*time.Millisecond || res.Max < 900*time.Millisecond {
		t.Errorf("p90 %v, max %v; want about 800ms and 1s: every request due in the stall waits out the rest of it", res.P90, res.Max)
	}
	if res.P50 > 100*time.Millisecond {
		t.Errorf("p50 %v; want the unstalled half fast", res.P50)
	}
	if res.Counts.OK != res.Due || res.PeakInFlight < 150 {
		t.Errorf("counts %+v of %d due, peak in flight %d; want all answered, about 200 held during the stall", res.Counts, res.Due, res.PeakInFlight)
	}
	if off := res.SendRate/200 - 1; math.Abs(off) > 0.05 {
		t.Errorf("sent %.1f/s; want 200 within 5%%: a stall of the upstream must not slow the sends", res.SendRate)
	}
}

func TestOpenCapHitIsNotSentOverLoopback(t *testing.T) {
	url, received := startStalling(t, time.Now().Add(1500*time.Millisecond))
	res, err := RunOpen(context.Background(), OpenConfig{URL: url, Rate: 50, Window: time.Second, MaxInFlight: 5})
	if err != nil {
		t.Fatalf("RunOpen = %v", err)
	}
	if res.Due != 50 || res.Sent != 5 || res.Counts.NotSent != 45 || res.Counts.OK != 5 {
		t.Errorf("due %d, sent %d, counts %+v; want 5 sent and answered, 45 not sent", res.Due, res.Sent, res.Counts)
	}
	if n := received(); n != 5 {
		t.Errorf("server received %d requests; want 5, the cap", n)
	}
	if !strings.Contains(strings.Join(res.RigNotes(), "; "), "45 requests not sent") {
		t.Errorf("rig notes %q; want the not-sent requests said", res.RigNotes())
	}
}

func TestOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := RunOpen(context.Background(), OpenConfig{URL: "http://" + addr + "/", Rate: 10}); err == nil || !strings.Contains(err.Error(), "target unreachable") {
		t.Errorf("RunOpen against a closed port = %v; want ErrUnreachable", err)
	}
}

func TestOpenCancelled(t *testing.T) {
	url, _ := startStalling(t, time.Now().Add(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := RunOpen(ctx, OpenConfig{URL: url, Rate: 50, Window: 10 * time.Second, Timeout: time.Minute})
	if err == nil || time.Since(begin) > 5*time.Second {
		t.Errorf("RunOpen cancelled after 500ms = %v after %v; want the context's error, at once", err, time.Since(begin))
	}
}

// Flows put each flow's clients on its own path of one host, counted in
// one window; ErrorPause spaces a client's requests after a failed one.
func TestRunFlows(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	res, err := Run(context.Background(), Config{
		URL: base, Flows: []Flow{{Path: "/wait?ms=20", Clients: 2}, {Path: "/wait?ms=50", Clients: 1}},
		Warmup: 200 * time.Millisecond, Window: time.Second,
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	// 2 / 0.02 s + 1 / 0.05 s = 120 rps; the p50 is the 20 ms flow's.
	if res.Concurrency != 3 || res.RPS < 70 || res.RPS > 130 || res.P50 < 20*time.Millisecond || res.P50 >= 50*time.Millisecond {
		t.Errorf("c%d, %.1f rps, p50 %v; want c3, about 120 rps, p50 of the 20 ms flow", res.Concurrency, res.RPS, res.P50)
	}

	// A 400 answered at once, and a client that waits 100 ms after each:
	// at most one request per 100 ms of the window.
	res, err = Run(context.Background(), Config{URL: base + "/wait?ms=bad", Concurrency: 1, Window: time.Second, ErrorPause: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := res.Errors.Status; n < 1 || n > 11 {
		t.Errorf("%d status errors in 1 s with a 100 ms pause after each; want 1..11", n)
	}

	for _, flows := range [][]Flow{{{Path: "/x", Clients: 0}}, {{Path: "x", Clients: 1}}} {
		if _, err := Run(context.Background(), Config{URL: base, Flows: flows}); !errors.Is(err, ErrConfig) {
			t.Errorf("Run with flows %+v = %v; want ErrConfig", flows, err)
		}
	}
}
