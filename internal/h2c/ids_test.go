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

	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	var opened, closed atomic.Int32
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
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
	go up.Serve(upLn)
	defer up.Close()

	lim, err := limiter.New(limiter.Config{Mode: limiter.Unbounded})
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	h := New(Config{
		Gate: admission.New(admission.Config{Policy: lim}), Upstream: "http://" + upLn.Addr().String(), Dial: d.DialContext,
		UpstreamTimeout: 5 * time.Second, HeaderTimeout: 5 * time.Second, BodyTimeout: 5 * time.Second,
		MaxBodyBytes: 1 << 20, MaxHeaderBytes: 8 << 10, AnswerBytes: 96 << 10, Cut: func() bool { return false }, Closed: func() {},
	})
	defer h.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			h.Serve(nc)
		}
	}()

	tr := &http.Transport{Protocols: protos}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i := range 7 {
		resp, err := client.Get("http://" + ln.Addr().String() + "/")
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
