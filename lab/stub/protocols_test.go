package stub

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestWebSocketEcho: /ws echoes each message after its ms, through the
// pool.
func TestWebSocketEcho(t *testing.T) {
	s, url := start(t, Config{Pool: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/ws?ms=50", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	start := time.Now()
	for _, msg := range []string{"a", "b"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := c.Read(ctx); err != nil || string(got) != msg {
			t.Fatalf("echo = %q, %v", got, err)
		}
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("two echoes in %v; want 50ms each", d)
	}
	if p := s.poolOcc.peak.Load(); p != 1 {
		t.Errorf("pool peak %d; want 1", p)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// TestGRPC: HTTP/2 on the stub's port is gRPC: Wait and CPU with the
// query knobs, a bad query as INVALID_ARGUMENT, and the health service.
func TestGRPC(t *testing.T) {
	_, url := start(t, Config{})
	cc, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := new(wrapperspb.StringValue)
	start := time.Now()
	if err := cc.Invoke(ctx, "/"+GRPCService+"/Wait", wrapperspb.String("ms=100"), out); err != nil || out.Value != "waited 100 ms\n" {
		t.Fatalf("Wait = %q, %v", out.GetValue(), err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("Wait took %v; want 100ms", d)
	}
	if err := cc.Invoke(ctx, "/"+GRPCService+"/CPU", wrapperspb.String("iters=1000"), out); err != nil || !strings.HasPrefix(out.Value, "cpu iters=1000 ") {
		t.Errorf("CPU = %q, %v", out.GetValue(), err)
	}
	if err := cc.Invoke(ctx, "/"+GRPCService+"/Wait", wrapperspb.String("ms=x"), out); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad query = %v; want INVALID_ARGUMENT", err)
	}
	if r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v", r, err)
	}
	// HTTP/1.1 on the same port is unchanged.
	if resp, err := client.Get(url + "/wait?ms=0"); err != nil || resp.StatusCode != 200 {
		t.Errorf("HTTP/1.1 = %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestH2C: a plain HTTP/2 request (prior knowledge) is served as its
// HTTP/1.1 twin is, through the same pool, on the port gRPC shares.
func TestH2C(t *testing.T) {
	s, url := start(t, Config{Pool: 1})
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: protos}, Timeout: 5 * time.Second}
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/wait?ms=20", 200, "waited 20 ms\n"},
		{"/cpu?iters=1000", 200, "cpu iters=1000 "},
		{"/wait?ms=x", 400, "not a whole number"},
		{"/nope", 404, "not found"},
		{"/ws", 400, "WebSocket"},
	} {
		resp, err := h2.Get(url + tc.path)
		if err != nil {
			t.Errorf("GET %s over h2c: %v", tc.path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != tc.status || !strings.Contains(string(body), tc.body) {
			t.Errorf("GET %s = HTTP/%d %d %q; want HTTP/2 %d with %q", tc.path, resp.ProtoMajor, resp.StatusCode, body, tc.status, tc.body)
		}
	}
	if p := s.poolOcc.peak.Load(); p != 1 {
		t.Errorf("pool peak %d; want 1: h2c requests go through the pool", p)
	}
}
