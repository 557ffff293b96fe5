package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestProtocolsThroughSidecar: a WebSocket and gRPC calls pass the
// sidecar, are measured, and the upgraded connections' limit holds; on
// the drain (what SIGTERM does) the WebSocket gets a close frame after
// DRAIN_TIMEOUT and a new gRPC call is not admitted.
// slowHealth is the health service, whose Check waits for the duration
// its service names ("300ms").
type slowHealth struct{ *health.Server }

func (h slowHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if d, err := time.ParseDuration(req.Service); err == nil {
		time.Sleep(d)
		req = &healthpb.HealthCheckRequest{}
	}
	return h.Server.Check(ctx, req)
}

// protocolsUpstream serves gRPC (slowHealth) and a WebSocket echo on one
// h2c and HTTP/1.1 port, and returns its address.
func protocolsUpstream(t *testing.T) string {
	t.Helper()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, slowHealth{health.NewServer()})
	return h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(context.Background())
			if err != nil {
				return
			}
			c.Write(context.Background(), typ, msg)
		}
	})
}

// h2cServer serves handler on loopback, HTTP/1.1 and h2c, until the test
// ends, and returns its address.
func h2cServer(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	up := &http.Server{Protocols: protos, Handler: handler}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	return ln.Addr().String()
}

func TestProtocolsThroughSidecar(t *testing.T) {
	upAddr := protocolsUpstream(t)
	cfg := testConfig(t, "LOOMGATE_UPSTREAM=http://"+upAddr, "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=2",
		"LOOMGATE_MAX_UPGRADED=1", "LOOMGATE_DRAIN_TIMEOUT=300ms")
	s, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	trafficLn, _ := net.Listen("tcp", "127.0.0.1:0")
	adminLn, _ := net.Listen("tcp", "127.0.0.1:0")
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx, trafficLn, adminLn) }()
	addr := trafficLn.Addr().String()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "hi" {
		t.Fatalf("echo = %q, %v", msg, err)
	}
	if _, resp, _ := websocket.Dial(ctx, "ws://"+addr+"/ws", nil); resp == nil || resp.StatusCode != 503 {
		t.Errorf("second WebSocket = %v; want 503 at LOOMGATE_MAX_UPGRADED=1", resp)
	}

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC Check = %v", err)
	}

	resp, err := http.Get("http://" + adminLn.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"loomgate_upgraded_connections 1", "loomgate_upgraded_connections_limit 1",
		`loomgate_requests_total{outcome="rejected_upgraded"} 1`, `loomgate_requests_total{outcome="ok"} 2`,
		`loomgate_upgraded_bytes_total{direction="from_client"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	start := time.Now()
	stop() // as SIGTERM does
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("WebSocket read during the drain = %v; want close 1001", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("WebSocket closed %v into the drain; want at its end, 300ms", d)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC call after the drain = %v; want UNAVAILABLE", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}
