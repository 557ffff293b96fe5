package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// TestDrainEndAnswersRequestsStillSending: at a drain's end, three
// requests whose clients are still sending what fasthttp reads before the
// handler: two admitted after "Expect: 100-continue" (one that sent none
// of its body, one 3000 bytes of 100000) and a plain one 3 bytes into a
// 10-byte body. They were dropped with their connections, the first two
// holding permits: a 100 Continue and then a close, no final status and no
// count. Each now gets 408 as at HeaderTimeout, counted client_timeout once,
// and the permits are back.
func TestDrainEndAnswersRequestsStillSending(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 4, QueueSize: 4, QueueTimeout: time.Minute},
		func(c *Config) {
			// Far longer than the test waits for an answer: only the
			// drain's end can bring it.
			c.HeaderTimeout = 30 * time.Second
			c.Logger = discardLogger()
		})
	silent := dial(t, tp.addr)
	io.WriteString(silent, "POST /silent HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
	if s, timedOut := readInterim(t, silent, silent.r, 5*time.Second); timedOut || !strings.Contains(s, "100") {
		t.Fatalf("got %q timed out=%v; want 100 Continue", s, timedOut)
	}
	partial := dial(t, tp.addr)
	io.WriteString(partial, "POST /partial HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
	if s, timedOut := readInterim(t, partial, partial.r, 5*time.Second); timedOut || !strings.Contains(s, "100") {
		t.Fatalf("got %q timed out=%v; want 100 Continue", s, timedOut)
	}
	io.WriteString(partial, strings.Repeat("a", 3000))
	small := dial(t, tp.addr)
	io.WriteString(small, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 2 })
	time.Sleep(100 * time.Millisecond) // the small body's 3 bytes read

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := tp.proxy.Shutdown(ctx); err == nil {
		t.Error("Shutdown = nil; want the drain reported incomplete: two requests held permits")
	}
	for _, c := range []*rawConn{silent, partial, small} {
		resp, _ := c.read(t, false)
		if resp.StatusCode != 408 || resp.Header.Get("Loomgate-Outcome") != "client_timeout" || !resp.Close {
			t.Errorf("%d %q close=%v; want 408 client_timeout and the connection closed",
				resp.StatusCode, resp.Header.Get("Loomgate-Outcome"), resp.Close)
		}
	}
	got := tp.rec.wait(t, 3)
	time.Sleep(100 * time.Millisecond) // a second count of any would be in by now
	if got = tp.rec.wait(t, 3); len(got) != 3 {
		t.Errorf("%d outcomes; want 3, one each", len(got))
	}
	for _, o := range got {
		if o.Kind != ClientTimeout || o.Status != 408 {
			t.Errorf("%s %s: outcome %v %d; want client_timeout 408", o.Method, o.Target, o.Kind, o.Status)
		}
	}
	tp.waitIdle(t)
}
