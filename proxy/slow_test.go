package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// A slow or stalled client must not hold a worker, and what it costs is
// counted against it, not against the upstream.

// readAnswer reads one response from c, or reports that the connection
// closed without one.
func readAnswer(t *testing.T, c net.Conn, within time.Duration) (resp *http.Response, closed bool) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("no answer and no close within %v", within)
		}
		return nil, true
	}
	io.Copy(io.Discard, resp.Body)
	return resp, false
}

func TestStalledUploadsReleaseTheirWorkers(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	const workers = 5
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: workers}, func(c *Config) {
		c.BodyTimeout = 300 * time.Millisecond
		c.UpstreamTimeout = 3 * time.Second
	})
	// Five clients declare 100 KB and send 20 KB (past what fasthttp reads
	// before admission), then stop.
	var stalled []net.Conn
	for range workers {
		c := dial(t, tp.addr)
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("a", 20000))
		stalled = append(stalled, c)
	}
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == workers })
	start := time.Now()
	for i, c := range stalled {
		resp, closed := readAnswer(t, c, 5*time.Second)
		if closed || resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("stalled upload %d: %v (closed %v); want 408", i, resp, closed)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("stalled uploads answered after %v; want about the 300ms body timeout", took)
	}
	tp.waitIdle(t)
	for _, o := range tp.rec.wait(t, workers) {
		if o.Kind != ClientTimeout || o.Status != http.StatusRequestTimeout || !o.Admitted {
			t.Errorf("stalled upload: outcome %v status %d admitted %v; want client_timeout 408, admitted", o.Kind, o.Status, o.Admitted)
		}
		if o.Service > 2*time.Second {
			t.Errorf("stalled upload held its worker %v; want about the body timeout", o.Service)
		}
	}
	// The workers serve others again.
	if resp, body := doGet(t, tp.addr, "/"); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("after the stalls: %d %q; want 200 ok", resp.StatusCode, body)
	}
}

func TestSlowClientsTimeOutBeforeAdmission(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, func(c *Config) {
		c.HeaderTimeout = 300 * time.Millisecond
		c.Logger = discardLogger()
	})
	tests := []struct {
		name string
		sent string // then the client stalls
	}{
		{"headers one byte short", "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: 1"},
		{"request line only", "GET / HTTP/1.1\r\n"},
		{"small body half sent", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("b", 50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, tp.addr)
			io.WriteString(c, tt.sent)
			resp, closed := readAnswer(t, c, 5*time.Second)
			if closed || resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
				t.Fatalf("response %v (closed %v); want 408 and Connection: close", resp, closed)
			}
		})
	}
	outcomes := tp.rec.wait(t, len(tests))
	for _, o := range outcomes {
		if o.Kind != ClientTimeout || o.Admission {
			t.Errorf("outcome %v admission %v; want client_timeout, before admission", o.Kind, o.Admission)
		}
	}
	if n := up.requests.Load(); n != 0 {
		t.Errorf("upstream saw %d requests; want none", n)
	}

	t.Run("nothing sent", func(t *testing.T) {
		// A connection that stays silent sent no request: it is closed at
		// the header timeout with no answer (a browser's preconnect would
		// read a 408 as an error) and counts as no request.
		before := tp.rec.count(ClientTimeout)
		c := dial(t, tp.addr)
		start := time.Now()
		if resp, closed := readAnswer(t, c, 5*time.Second); !closed {
			t.Errorf("silent connection got %v; want it closed without an answer", resp)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("silent connection closed after %v; want about the 300ms header timeout", took)
		}
		if got := tp.rec.count(ClientTimeout); got != before {
			t.Errorf("%d client_timeout outcomes after a silent connection; want %d", got, before)
		}
	})

	t.Run("slowloris", func(t *testing.T) {
		// Many connections sending headers a byte every 50 ms, for three
		// times the header timeout: every one is answered 408 and cut at
		// the timeout, whatever it keeps sending.
		const n = 200
		conns := make([]net.Conn, n)
		for i := range conns {
			conns[i] = dial(t, tp.addr)
		}
		header := "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: 1234567890"
		for i := range 18 {
			for _, c := range conns {
				c.Write([]byte{header[i]}) // fails once the proxy has cut it
			}
			time.Sleep(50 * time.Millisecond)
		}
		for j, c := range conns {
			if resp, closed := readAnswer(t, c, 2*time.Second); closed || resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("slowloris connection %d: %v (closed %v); want 408", j, resp, closed)
			}
		}
		if got := tp.rec.count(ClientTimeout); got < len(tests)+n {
			t.Errorf("%d client_timeout outcomes; want %d", got, len(tests)+n)
		}
	})
}

// TestQueuedPastTheHeaderTimeout: the header timeout ends with the headers.
// A request that waits longer than it in the queue is still there, and
// served, and a client that leaves is still noticed.
func TestQueuedPastTheHeaderTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Minute}, func(c *Config) {
		c.HeaderTimeout = 200 * time.Millisecond
	})
	holder := dial(t, tp.addr)
	io.WriteString(holder, get("/hold"))
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 1 })
	waiter := dial(t, tp.addr)
	io.WriteString(waiter, get("/wait"))
	leaver := dial(t, tp.addr)
	io.WriteString(leaver, get("/leave"))
	waitFor(t, func() bool { return tp.limiter.Stats().Queued == 2 })
	time.Sleep(700 * time.Millisecond) // well past the header timeout
	if q := tp.limiter.Stats().Queued; q != 2 {
		t.Fatalf("queued = %d after the header timeout; want both still waiting", q)
	}
	leaver.Close()
	waitFor(t, func() bool { return tp.limiter.Stats().Queued == 1 })
	close(release)
	if resp, body := waiter.read(t, false); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("waiter: %d %q; want 200 ok", resp.StatusCode, body)
	}
	tp.waitIdle(t)
}

// TestBareLineFeedsAnsweredAtOnce: a new connection's first request with
// bare LF line ends is answered 400 as soon as its header block is whole,
// not when the header timeout (here 10 s) gives up on a CRLF.
func TestBareLineFeedsAnsweredAtOnce(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, func(c *Config) {
		c.HeaderTimeout = 10 * time.Second
		c.Logger = discardLogger()
	})
	for i, raw := range []string{
		"GET /lf HTTP/1.1\nHost: x\n\n",
		"GET /lf HTTP/1.1\r\nHost: x\n\r\n",
		"POST /lf HTTP/1.1\nHost: x\nContent-Length: 3\n\nabc",
	} {
		c := dial(t, tp.addr)
		io.WriteString(c, raw)
		resp, closed := readAnswer(t, c, 5*time.Second)
		if closed || resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Loomgate-Outcome") != "bad_request" {
			t.Fatalf("%q: response %v (closed %v); want 400 bad_request within 5s, the header timeout being 10s", raw, resp, closed)
		}
		if o := tp.rec.wait(t, i+1)[i]; o.Kind != BadRequest || o.Status != 400 {
			t.Errorf("%q: outcome %v %d; want bad_request 400", raw, o.Kind, o.Status)
		}
	}
	if n := up.requests.Load(); n != 0 {
		t.Errorf("upstream saw %d requests; want none", n)
	}
}

// TestBareLineFeeds: RFC 9112 (2.2) lets a server take a bare LF for a line
// end or not. fasthttp frames a header block only at its CRLFCRLF, so a
// request with bare LF line ends is still waiting for one when the header
// timeout comes; it was complete, though, and the client did not stall: it
// is answered 400 and counted bad_request, not 408 client_timeout.
func TestBareLineFeeds(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, func(c *Config) {
		c.HeaderTimeout = 300 * time.Millisecond
		c.Logger = discardLogger()
	})
	for i, raw := range []string{
		"GET /lf HTTP/1.1\nHost: x\n\n",
		"GET /lf HTTP/1.1\r\nHost: x\n\r\n",
		"POST /lf HTTP/1.1\nHost: x\nContent-Length: 3\n\nabc",
		"GET /lf HTTP/1.1\nHost: x\nX-A: \\n\n\n",
	} {
		c := dial(t, tp.addr)
		io.WriteString(c, raw)
		resp, closed := readAnswer(t, c, 5*time.Second)
		if closed || resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Fatalf("%q: response %v (closed %v); want 400 and Connection: close", raw, resp, closed)
		}
		if o := tp.rec.wait(t, i+1)[i]; o.Kind != BadRequest || o.Status != 400 {
			t.Errorf("%q: outcome %v %d; want bad_request 400", raw, o.Kind, o.Status)
		}
	}
	// A client that stalls inside a bare-LF block is still a stall.
	c := dial(t, tp.addr)
	io.WriteString(c, "GET /lf HTTP/1.1\nHost: x\n")
	if resp, closed := readAnswer(t, c, 5*time.Second); closed || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("unfinished block: %v (closed %v); want 408", resp, closed)
	}
	if n := up.requests.Load(); n != 0 {
		t.Errorf("upstream saw %d requests; want none", n)
	}
}
