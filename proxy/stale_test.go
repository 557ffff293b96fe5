package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// connUpstream is an HTTP/1.1 upstream on loopback that hands each
// connection to serve, which answers the requests on it as it chooses, and
// counts the requests it read.
type connUpstream struct {
	URL      string
	requests atomic.Int64
}

func newConnUpstream(t *testing.T, serve func(u *connUpstream, c net.Conn, br *bufio.Reader)) *connUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &connUpstream{URL: "http://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(u, c, bufio.NewReader(c))
			}()
		}
	}()
	return u
}

// next reads the next request on c whole, and counts it.
func (u *connUpstream) next(br *bufio.Reader) bool {
	r, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, r.Body)
	u.requests.Add(1)
	return true
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// TestUpstreamIdleCloseIsNoFailure: an upstream that closes a kept-alive
// connection 50 ms after its last answer, as servers with a short idle
// timeout do, without saying so in the answer; and one that resets it
// instead. Each request comes later than that, when the pooled connection
// is already closed: each is answered, counted ok, and reaches the
// upstream once, whatever its method and however many writes it takes.
func TestUpstreamIdleCloseIsNoFailure(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{false, true} {
		name := "close"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) { idleCloseIsNoFailure(t, reset) })
	}
}

func idleCloseIsNoFailure(t *testing.T, reset bool) {
	up := newConnUpstream(t, func(u *connUpstream, c net.Conn, br *bufio.Reader) {
		for {
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if !u.next(br) {
				if reset {
					c.(*net.TCPConn).SetLinger(0)
				}
				return
			}
			io.WriteString(c, okAnswer)
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	for i, raw := range []string{
		get("/a"),
		get("/b"),
		"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
		"DELETE /d HTTP/1.1\r\nHost: x\r\n\r\n",
		"PATCH /e HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\ny",
		// Held whole, and longer than one write.
		"PUT /f HTTP/1.1\r\nHost: x\r\nContent-Length: 6000\r\n\r\n" + strings.Repeat("f", 6000),
	} {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		resp, body := dial(t, tp.addr).roundTrip(t, raw)
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q; want 200 ok", i+1, resp.StatusCode, body)
		}
		if n := up.requests.Load(); n != int64(i+1) {
			t.Fatalf("after request %d the upstream read %d; want each once", i+1, n)
		}
	}
	for _, o := range tp.rec.wait(t, 6) {
		if o.Kind != OK {
			t.Errorf("outcome %v %d; want ok", o.Kind, o.Status)
		}
	}
	tp.waitIdle(t)
}

// closesUnderTheSecond is a proxy in front of an upstream that answers the
// first request on a connection and closes the connection under the
// second, having read it.
func closesUnderTheSecond(t *testing.T) (*connUpstream, *testProxy) {
	up := newConnUpstream(t, func(u *connUpstream, c net.Conn, br *bufio.Reader) {
		if !u.next(br) {
			return
		}
		io.WriteString(c, okAnswer)
		u.next(br) // and no answer
	})
	return up, startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
}

// TestRequestNotReplayedWhereTheUpstreamMayHaveActed: an upstream that
// answers the first request on a connection and closes the connection
// under the second, having read it. A POST may have been acted on: it is
// not sent again, and the failure is the upstream's. A GET goes again on a
// new connection.
func TestRequestNotReplayedWhereTheUpstreamMayHaveActed(t *testing.T) {
	up, tp := closesUnderTheSecond(t)
	c := dial(t, tp.addr)
	if resp, _ := c.roundTrip(t, get("/first")); resp.StatusCode != 200 {
		t.Fatalf("first GET: %d; want 200", resp.StatusCode)
	}
	resp, _ := c.roundTrip(t, "POST /pay HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
	if resp.StatusCode != 502 {
		t.Errorf("POST on a connection closed under it: %d; want 502", resp.StatusCode)
	}
	if n := up.requests.Load(); n != 2 {
		t.Errorf("the upstream read %d requests; want 2, the POST once", n)
	}
	if o := tp.rec.wait(t, 2)[1]; o.Kind != UpstreamError {
		t.Errorf("POST counted %v; want upstream_error", o.Kind)
	}
	// A fresh connection answers once; the GET after it on the same
	// pooled connection meets the close and goes again on another.
	for i := range 2 {
		if resp, body := c.roundTrip(t, get("/again")); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("GET %d: %d %q; want 200 ok", i+1, resp.StatusCode, body)
		}
	}
	if n := up.requests.Load(); n != 5 {
		t.Errorf("the upstream read %d requests; want 5: the second GET twice", n)
	}
	for _, o := range tp.rec.wait(t, 4)[2:] {
		if o.Kind != OK {
			t.Errorf("GET counted %v; want ok", o.Kind)
		}
	}
	tp.waitIdle(t)
}

// TestIdempotentRequestWithABodyGoesAgain: PUTs with a body of 5 bytes,
// none (Content-Length: 0) and 8 KiB, the most held, and a POST with an
// Idempotency-Key, on a pooled connection the upstream closes under them
// having read them. Each is held whole, so each goes again on a new
// connection and is answered.
func TestIdempotentRequestWithABodyGoesAgain(t *testing.T) {
	up, tp := closesUnderTheSecond(t)
	c := dial(t, tp.addr)
	for i, raw := range []string{
		"PUT /doc HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\nContent-Length: 2\r\n\r\n{}",
		"PUT /empty HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"PUT /doc HTTP/1.1\r\nHost: x\r\nContent-Length: 8192\r\n\r\n" + strings.Repeat("d", 8192),
	} {
		// The first request on a fresh connection is answered; the one
		// after it on the same pooled connection meets the close.
		if resp, _ := c.roundTrip(t, get("/warm")); resp.StatusCode != 200 {
			t.Fatalf("GET: %d; want 200", resp.StatusCode)
		}
		before := up.requests.Load()
		if resp, body := c.roundTrip(t, raw); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("request %d on a connection closed under it: %d %q; want 200 ok", i+1, resp.StatusCode, body)
		}
		if n := up.requests.Load() - before; n != 2 {
			t.Errorf("request %d: the upstream read it %d times; want 2", i+1, n)
		}
	}
	tp.waitIdle(t)
}

// TestRequestGoesAgainAtMostOnce: an upstream that answers the first
// request on each connection and reads the next and closes without an
// answer, with several connections in the pool. A GET is sent once more
// after the first close, not once per pooled connection: the upstream
// failing on a request is not an idle close.
func TestRequestGoesAgainAtMostOnce(t *testing.T) {
	const warm = 4
	up := newConnUpstream(t, func(u *connUpstream, c net.Conn, br *bufio.Reader) {
		if !u.next(br) {
			return
		}
		time.Sleep(100 * time.Millisecond) // so that the warm-up's requests each take a connection
		io.WriteString(c, okAnswer)
		u.next(br) // and no answer
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	done := make(chan int, warm)
	for range warm {
		go func() {
			resp, _ := dial(t, tp.addr).roundTrip(t, get("/warm"))
			done <- resp.StatusCode
		}()
	}
	for range warm {
		if s := <-done; s != 200 {
			t.Fatalf("warm-up GET: %d; want 200", s)
		}
	}
	tp.rec.wait(t, warm)
	before := up.requests.Load()
	resp, _ := dial(t, tp.addr).roundTrip(t, get("/fails"))
	if resp.StatusCode != 502 {
		t.Errorf("GET the upstream closes under each time: %d; want 502", resp.StatusCode)
	}
	if n := up.requests.Load() - before; n != 2 {
		t.Errorf("the upstream read the GET %d times; want 2, one retry", n)
	}
	if o := tp.rec.wait(t, warm+1)[warm]; o.Kind != UpstreamError {
		t.Errorf("GET counted %v; want upstream_error", o.Kind)
	}
	tp.waitIdle(t)
}

// TestAConnectionSeenClosedIsNoRetry: two pooled connections, the older
// closed by the upstream as it sat idle, the newer closed under the next
// request having read it (its idle close came as the request did). A
// GET finds the older closed by the look before anything is written, goes
// on the newer, meets the close, and goes again on a new connection,
// where it is answered: the look is no retry, and the GET reached the
// upstream twice, as with one stale connection.
func TestAConnectionSeenClosedIsNoRetry(t *testing.T) {
	var accepted atomic.Int64
	up := newConnUpstream(t, func(u *connUpstream, c net.Conn, br *bufio.Reader) {
		switch accepted.Add(1) {
		case 1: // answered once the second is open, then closed while idle
			if u.next(br) {
				for accepted.Load() < 2 {
					time.Sleep(time.Millisecond)
				}
				io.WriteString(c, okAnswer)
			}
		case 2: // answered second, then closed under the next request
			if !u.next(br) {
				return
			}
			time.Sleep(100 * time.Millisecond)
			io.WriteString(c, okAnswer)
			u.next(br)
		default:
			for u.next(br) {
				io.WriteString(c, okAnswer)
			}
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	// Two at once, each on a connection of its own: the first accepted is
	// answered first and goes back to the pool first, and the pool hands
	// out the one that went back first.
	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, _ := dial(t, tp.addr).roundTrip(t, get("/warm"))
			done <- resp.StatusCode
		}()
	}
	for range 2 {
		if s := <-done; s != 200 {
			t.Fatalf("warm-up GET: %d; want 200", s)
		}
	}
	tp.rec.wait(t, 2)
	if n := accepted.Load(); n != 2 {
		t.Fatalf("the warm-up opened %d connections; want 2", n)
	}
	time.Sleep(50 * time.Millisecond) // the first connection's close arrives
	before := up.requests.Load()
	resp, body := dial(t, tp.addr).roundTrip(t, get("/after"))
	if resp.StatusCode != 200 || body != "ok" {
		t.Errorf("GET after a pooled connection seen closed and one closed under it: %d %q; want 200 ok", resp.StatusCode, body)
	}
	if n := up.requests.Load() - before; n != 2 {
		t.Errorf("the upstream read the GET %d times; want 2", n)
	}
	if o := tp.rec.wait(t, 3)[2]; o.Kind != OK {
		t.Errorf("GET counted %v; want ok", o.Kind)
	}
	tp.waitIdle(t)
}
