package proxy

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// TestOwnAnswersAreMarked: every answer the proxy makes itself names its
// outcome in Loomgate-Outcome, so that a client's retry policy can tell it
// from the upstream's own answer with the same status.
func TestOwnAnswersAreMarked(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			<-hold
		case "/own503":
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case "/slow":
			time.Sleep(time.Second)
		}
		io.WriteString(w, "ok")
	})
	for _, status := range []int{0, 429} {
		tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, func(c *Config) {
			c.RejectStatus = status
			c.UpstreamTimeout = 300 * time.Millisecond
			c.Logger = discardLogger()
		})
		wantReject := 503
		if status != 0 {
			wantReject = status
		}
		check := func(name string, resp *http.Response, wantStatus int, wantOutcome string) {
			t.Helper()
			if resp.StatusCode != wantStatus || resp.Header.Get("Loomgate-Outcome") != wantOutcome {
				t.Errorf("RejectStatus %d, %s: %d Loomgate-Outcome %q; want %d %q", status, name,
					resp.StatusCode, resp.Header.Get("Loomgate-Outcome"), wantStatus, wantOutcome)
			}
		}
		// The upstream's own 503 is not marked.
		resp, _ := doGet(t, tp.addr, "/own503")
		check("upstream's 503", resp, 503, "")
		resp, _ = doGet(t, tp.addr, "/slow")
		check("upstream timeout", resp, 504, "upstream_timeout")
		c := dial(t, tp.addr)
		resp, _ = c.roundTrip(t, "GET / HTTP/1.1\r\nHost: x\r\nX A: 1\r\n\r\n")
		check("malformed", resp, 400, "bad_request")
		c = dial(t, tp.addr)
		resp, _ = c.roundTrip(t, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3a\r\n\r\n")
		check("malformed, read by fasthttp", resp, 400, "bad_request")

		holder := dial(t, tp.addr)
		io.WriteString(holder, get("/hold"))
		waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 1 })
		resp, _ = doGet(t, tp.addr, "/rejected")
		check("queue full", resp, wantReject, "rejected_queue_full")
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("RejectStatus %d: rejection without Retry-After", status)
		}
		hold <- struct{}{}
		holder.read(t, false)
	}

	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := down.Addr().String()
	down.Close()
	tp := startProxy(t, "http://"+addr, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	resp, _ := doGet(t, tp.addr, "/")
	if resp.StatusCode != 502 || resp.Header.Get("Loomgate-Outcome") != "upstream_error" {
		t.Errorf("upstream down: %d %q; want 502 upstream_error", resp.StatusCode, resp.Header.Get("Loomgate-Outcome"))
	}
}
