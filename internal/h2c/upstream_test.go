package h2c

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/limiter"
)

// TestSpentConnectionLeavesThePool: an upstream connection that has used
// its last stream id takes no more streams; the next goes on a new
// connection, none fails, and the spent one closes after its last stream.
func TestSpentConnectionLeavesThePool(t *testing.T) {
	defer func(v uint32) { lastStreamID = v }(lastStreamID)
	lastStreamID = 5 // streams 1, 3 and 5, then a new connection

	upAddr, opened, closed := countingUpstream(t)
	addr := startRelay(t, upAddr)
	client := h2cClient(t)
	for i := range 7 {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("call %d: %d %q; want 200 \"ok\"", i, resp.StatusCode, body)
		}
	}
	// 7 calls at 3 ids a connection: the third connection carries the
	// seventh, and the first two closed after their third.
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if o, c := opened.Load(), closed.Load(); o != 3 || c != 2 {
		t.Errorf("upstream connections: %d opened, %d closed; want 3 and 2", o, c)
	}
}

// TestIdleUpstreamConnectionCloses: an upstream connection with no stream
// open for upstreamIdleTimeout closes, as Go's Transport closes its idle
// connections, and the next call dials another.
func TestIdleUpstreamConnectionCloses(t *testing.T) {
	defer func(v time.Duration) { upstreamIdleTimeout = v }(upstreamIdleTimeout)
	upstreamIdleTimeout = 200 * time.Millisecond

	upAddr, opened, closed := countingUpstream(t)
	addr := startRelay(t, upAddr)
	client := h2cClient(t)
	call := func(i int) {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: %d; want 200", i, resp.StatusCode)
		}
	}
	// Calls closer together than the timeout keep the connection.
	for i := range 5 {
		call(i)
		time.Sleep(50 * time.Millisecond)
	}
	if o, c := opened.Load(), closed.Load(); o != 1 || c != 0 {
		t.Errorf("after calls 50 ms apart: %d opened, %d closed; want 1 and 0", o, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := closed.Load(); c != 1 {
		t.Fatalf("%d upstream connections closed after 5 s idle; want 1", c)
	}
	call(5)
	if o := opened.Load(); o != 2 {
		t.Errorf("%d upstream connections opened; want 2, the second for the call after the close", o)
	}
}

// countingUpstream is an h2c upstream answering "ok", and the count of
// connections it opened and closed.
func countingUpstream(t *testing.T) (addr string, opened, closed *atomic.Int32) {
	opened, closed = new(atomic.Int32), new(atomic.Int32)
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Protocols: protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	return ln.Addr().String(), opened, closed
}

// startRelay serves the relay, unbounded, in front of upAddr, and returns
// its address.
func startRelay(t *testing.T, upAddr string) string {
	lim, err := limiter.New(limiter.Config{Mode: limiter.Unbounded})
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	h := New(Config{
		Gate: admission.New(admission.Config{Policy: lim}), Upstream: "http://" + upAddr, Dial: d.DialContext,
		UpstreamTimeout: 5 * time.Second, HeaderTimeout: 5 * time.Second, BodyTimeout: 5 * time.Second,
		MaxBodyBytes: 1 << 20, MaxHeaderBytes: 8 << 10, AnswerBytes: 96 << 10,
		Cut: func() bool { return false }, Closed: func() {},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		h.Close()
	})
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			h.Serve(nc)
		}
	}()
	return ln.Addr().String()
}

// h2cClient is an h2c client whose calls share a connection.
func h2cClient(t *testing.T) *http.Client {
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protos}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}
