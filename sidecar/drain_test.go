package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestDrainTimeoutAnswersWhatIsLeft: two requests at an upstream that
// takes 5 s (one of them an HTTP/2 stream) and four queued behind
// WORKERS=2 when the drain begins, with DRAIN_TIMEOUT=1s. At the drain's
// end they were dropped with their connections, unanswered and uncounted. Each now gets an answer, the
// queued ones 503 as at their queue timeout and those at the upstream 504
// as at UPSTREAM_TIMEOUT, counted once each, and Run still reports the
// incomplete drain.
func TestDrainTimeoutAnswersWhatIsLeft(t *testing.T) {
	t.Parallel()
	// The upstream speaks h2c too: one of the two at the upstream is an
	// HTTP/2 stream, which goes to it as HTTP/2.
	up := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	cfg := testConfig(t, "LOOMGATE_UPSTREAM=http://"+up, "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=2",
		"LOOMGATE_QUEUE_TIMEOUT=30s", "LOOMGATE_UPSTREAM_TIMEOUT=30s", "LOOMGATE_DRAIN_TIMEOUT=1s")
	s, stop, ran := launch(t, cfg, Options{Logger: slog.New(slog.DiscardHandler)})

	var mu sync.Mutex
	got := map[string]int{} // status and outcome, as the clients saw them
	var wg sync.WaitGroup
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	for i := range 6 {
		client := http.DefaultClient
		if i == 0 {
			client = &http.Client{Transport: h2}
		}
		if i == 1 {
			// The HTTP/2 stream first, so that it is one of the two at
			// the upstream.
			for s.Stats().InFlight < 1 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		wg.Go(func() {
			resp, err := client.Get(s.URL + "/slow")
			if err != nil {
				t.Errorf("no answer: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			got[resp.Status[:3]+" "+resp.Header.Get("Loomgate-Outcome")]++
			if resp.ProtoMajor == 2 && resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("the HTTP/2 stream got %s; want 504, as it was at the upstream", resp.Status)
			}
			mu.Unlock()
		})
	}
	for st := s.Stats(); st.InFlight < 2 || st.Queued < 4; st = s.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-ran; !errors.Is(err, ErrDrainTimeout) {
		t.Errorf("Run = %v; want ErrDrainTimeout", err)
	}
	// The process exits when Run returns: every answer must be out by
	// then, each connection answered and closed, not still being written.
	if n := s.proxy.ClientConns(); n > 1 {
		t.Errorf("%d client connections open when Run returned; want at most the HTTP/2 one, every HTTP/1 answer written and its connection closed", n)
	}
	wg.Wait()
	want := map[string]int{"504 upstream_timeout": 2, "503 rejected_queue_timeout": 4}
	if len(got) != len(want) || got["504 upstream_timeout"] != 2 || got["503 rejected_queue_timeout"] != 4 {
		t.Errorf("clients got %v; want %v", got, want)
	}
	for kind, n := range map[string]float64{"upstream_timeout": 2, "rejected_queue_timeout": 4} {
		if c := gathered(t, s.Sidecar, "loomgate_requests_total", kind); c != n {
			t.Errorf("loomgate_requests_total{outcome=%q} = %v; want %v", kind, c, n)
		}
	}
}

// TestDrainWithNothingInFlightIsComplete: when DRAIN_TIMEOUT ends with no
// request queued or in flight, the drain was complete, and Run returns nil
// (the process exits 0), whatever connection is still open: here one
// inside a request's headers, which HEADER_TIMEOUT would end long after.
// It was reported as a drain that timed out, status 1.
func TestDrainWithNothingInFlightIsComplete(t *testing.T) {
	cfg := testConfig(t, "LOOMGATE_UPSTREAM="+upstream(t, 0), "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=2",
		"LOOMGATE_HEADER_TIMEOUT=1m", "LOOMGATE_DRAIN_TIMEOUT=200ms")
	s, stop, ran := launch(t, cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: drain.test\r\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.proxy.ClientConns() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection was not seen within 10s")
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Errorf("Run = %v; want nil: nothing was queued or in flight", err)
	}
}

// TestDrainEndCutsGRPCStreamWithUnavailable: a gRPC stream past its
// headers (a Watch) when DRAIN_TIMEOUT ends is cut with trailers,
// grpc-status UNAVAILABLE (14), which gRPC clients take as "try again,
// elsewhere", and Loomgate-Outcome: drain_timeout; it is counted so, once;
// and the drain is complete, the stream holding no permit, as an upgraded
// connection: Run returns nil, the process exits 0. It got RST_STREAM
// INTERNAL_ERROR, which gRPC clients do not retry, no outcome header, was
// counted upstream_timeout, and the process exited 1.
func TestDrainEndCutsGRPCStreamWithUnavailable(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "LOOMGATE_UPSTREAM=http://"+protocolsUpstream(t), "LOOMGATE_DRAIN_TIMEOUT=1s")
	s, stop, ran := launch(t, cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	cc, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("Watch's first message: %v", err)
	}
	stop()
	_, err = w.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("the stream at the drain's end: %v; want UNAVAILABLE", err)
	}
	if got := w.Trailer().Get("loomgate-outcome"); len(got) != 1 || got[0] != "drain_timeout" {
		t.Errorf("Loomgate-Outcome trailer %q; want drain_timeout", got)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run = %v; want nil (exit 0): the stream held no permit", err)
	}
	for kind, want := range map[string]float64{"drain_timeout": 1, "upstream_timeout": 0} {
		if n := gathered(t, s.Sidecar, "loomgate_requests_total", kind); n != want {
			t.Errorf("loomgate_requests_total{outcome=%q} = %v; want %v", kind, n, want)
		}
	}
}
