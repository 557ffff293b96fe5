package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomgate/loomgate/lab/stub"
	"github.com/loomgate/loomgate/lab/stub/stubtest"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startCountedStub is stubtest.Start that also counts the connections made to
// the stub.
func startCountedStub(t *testing.T, cfg stub.Config) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	return stubtest.Serve(t, cfg, cl), &cl.n
}

// TestRunOverHTTP2AgainstStub: over h2c and gRPC, eight users behind the
// stub's hidden pool of two at 50 ms get what the pool serves, 40 rps,
// as streams on the two connections asked for.
func TestRunOverHTTP2AgainstStub(t *testing.T) {
	for _, p := range []Proto{H2C, GRPC} {
		t.Run(string(p), func(t *testing.T) {
			base, conns := startCountedStub(t, stub.Config{Pool: 2})
			before := conns.Load()
			var progress strings.Builder
			res, err := Run(context.Background(), Config{
				URL: base + "/wait?ms=50", Concurrency: 8, Proto: p, Conns: 2,
				Warmup: 300 * time.Millisecond, Window: time.Second, Progress: &progress, Label: "p",
			})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			// 2 workers / 50 ms = 40 rps; the margins allow two shared
			// cores, not a rig that bypasses the pool (160 rps).
			if res.RPS < 28 || res.RPS > 44 || res.Errors.Total() != 0 {
				t.Errorf("%.1f rps, errors %+v; want 28..44 (2 / 50 ms = 40), none", res.RPS, res.Errors)
			}
			// Eight users wait their turn: 4 × 50 ms each.
			if res.Mean < 150*time.Millisecond {
				t.Errorf("mean %v; want about 200ms, 8 users on a pool of 2", res.Mean)
			}
			// The TCP probe before the load is one connection more.
			if got := conns.Load() - before; got != 3 {
				t.Errorf("%d connections; want the probe and the 2 the streams share", got)
			}
			if want := "8 users on " + base + "/wait?ms=50 over " + string(p) + " on 2 connections"; !strings.Contains(progress.String(), want) {
				t.Errorf("progress lacks %q:\n%s", want, progress.String())
			}
		})
	}
}

// TestRunOpenOverHTTP2AgainstStub: every request due is answered once, in
// both protocols; gRPC's bad query is an answer that is not OK.
func TestRunOpenOverHTTP2AgainstStub(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	for _, tc := range []struct {
		p    Proto
		path string
		ok   bool
	}{{H2C, "/wait?ms=1", true}, {GRPC, "/wait?ms=1", true}, {GRPC, "/grpc.health.v1.Health/Check", true}, {GRPC, "/wait?ms=x", false}} {
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: base + tc.path, Rate: 100, Window: time.Second, Proto: tc.p,
		})
		if err != nil {
			t.Fatalf("%s %s: RunOpen = %v", tc.p, tc.path, err)
		}
		want := OpenCounts{OK: 100}
		if !tc.ok {
			want = OpenCounts{OtherStatus: 100}
		}
		if res.Due != 100 || res.Counts != want {
			t.Errorf("%s %s: due %d, counts %+v; want 100, %+v", tc.p, tc.path, res.Due, res.Counts, want)
		}
	}
}

func TestProtoConfigRefused(t *testing.T) {
	for _, cfg := range []Config{
		{URL: "http://127.0.0.1:1/wait", Concurrency: 1, Conns: 2},
		{URL: "http://127.0.0.1:1/wait", Concurrency: 1, Proto: "h3"},
		{URL: "http://127.0.0.1:1/wait", Concurrency: 1, Proto: GRPC, Conns: -1},
		{URL: "http://127.0.0.1:1/no/such/method/here", Concurrency: 1, Proto: GRPC},
		{URL: "https://127.0.0.1:1/wait", Concurrency: 1, Proto: H2C},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("Run(%+v) = %v; want ErrConfig", cfg, err)
		}
	}
	if _, err := RunOpen(context.Background(), OpenConfig{URL: "http://127.0.0.1:1/", Rate: 1, Proto: GRPC}); !errors.Is(err, ErrConfig) {
		t.Errorf("RunOpen with a gRPC URL naming no method = %v; want ErrConfig", err)
	}
}

// TestGRPCAnswer: a call's status is counted as HTTP/1.1's answer would
// be: loomgate's rejections as 503 with their Retry-After.
func TestGRPCAnswer(t *testing.T) {
	outcome := func(o string) metadata.MD { return metadata.Pairs("loomgate-outcome", o, "retry-after", "2") }
	for _, tc := range []struct {
		name            string
		err, deadline   error
		header, trailer metadata.MD
		status          int
		retryAfter      int64
		kind            kind
	}{
		{"ok", nil, nil, nil, nil, 200, -1, kindOK},
		{"rejected", status.Error(codes.ResourceExhausted, "queue full"), nil, nil, outcome("rejected_queue_full"), 503, 2, kindStatus},
		{"upstream exhausted", status.Error(codes.ResourceExhausted, "x"), nil, nil, metadata.Pairs("a", "b"), 503, -1, kindStatus},
		{"unavailable answered", status.Error(codes.Unavailable, "x"), nil, nil, outcome("upstream_error"), 503, -1, kindStatus},
		{"no server", status.Error(codes.Unavailable, "connection refused"), nil, nil, nil, 0, -1, kindConnect},
		{"upstream timeout", status.Error(codes.DeadlineExceeded, "x"), nil, nil, outcome("upstream_timeout"), 504, -1, kindStatus},
		{"own deadline", status.Error(codes.DeadlineExceeded, "x"), context.DeadlineExceeded, nil, nil, 0, -1, kindTimeout},
		{"invalid", status.Error(codes.InvalidArgument, "x"), nil, metadata.Pairs("a", "b"), nil, 500, -1, kindStatus},
	} {
		a := grpcAnswer(tc.err, tc.deadline, tc.header, tc.trailer)
		if a.status != tc.status || a.retryAfter != tc.retryAfter || classify(a.err, a.status) != tc.kind {
			t.Errorf("%s: status %d, Retry-After %d, kind %d (%v); want %d, %d, %d", tc.name, a.status, a.retryAfter, classify(a.err, a.status), a.err, tc.status, tc.retryAfter, tc.kind)
		}
	}
}
