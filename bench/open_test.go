package bench

import (
	"bytes"
	"context"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/stub"
	"github.com/valyala/fasthttp"
)

func TestOpenRateAgainstStub(t *testing.T) {
	base := startStub(t, stub.Config{})
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
