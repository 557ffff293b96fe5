package sidecar

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestProtocolsSIGTERM: a sidecar process told SIGTERM lets a gRPC call in
// flight finish, admits no new one, sends an open WebSocket a close frame
// at the end of DRAIN_TIMEOUT, and exits 0.
func TestProtocolsSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	upAddr := protocolsUpstream(t)
	c := startChild(t, "LOOMGATE_UPSTREAM=http://"+upAddr, "LOOMGATE_DRAIN_TIMEOUT=1s", "LOOMGATE_MAX_CONNS=0")
	traffic := c.traffic

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+traffic+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	cc, err := grpc.NewClient(traffic, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC Check = %v", err)
	}
	inFlight := make(chan error, 1)
	go func() {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "500ms"})
		inFlight <- err
	}()
	time.Sleep(100 * time.Millisecond) // the call is at the upstream
	start := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-inFlight; err != nil {
		t.Errorf("gRPC call in flight at SIGTERM = %v; want it to finish", err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC call after SIGTERM = %v; want UNAVAILABLE", err)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("WebSocket read after SIGTERM = %v; want close 1001", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("WebSocket closed %v after SIGTERM; want at DRAIN_TIMEOUT, 1s", d)
	}
	if err := c.exit(t, 15*time.Second); err != nil {
		t.Errorf("the sidecar exited with %v; want 0", err)
	}
}
