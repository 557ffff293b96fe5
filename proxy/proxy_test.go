package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/limiter"
)

var unbounded = limiter.Config{Mode: limiter.Unbounded}

func TestRequestHeadersAndTarget(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, unbounded, nil)

	// A target a normalising proxy would rewrite: dot segments, a double
	// slash, an encoded slash, an encoded space.
	const target = "/a/../b//c%2Fd?x=1&y=%20z"
	raw := "GET " + target + " HTTP/1.1\r\n" +
		"Host: example.test\r\n" +
		"Connection: keep-alive, X-Hop\r\n" +
		"X-Hop: secret\r\n" +
		"Keep-Alive: timeout=5\r\n" +
		"Proxy-Authorization: Basic Zm9vOmJhcg==\r\n" +
		"Proxy-Connection: keep-alive\r\n" +
		"Te: trailers\r\n" +
		"Upgrade: websocket\r\n" +
		"X-Forwarded-For: 203.0.113.7\r\n" +
		"X-Forwarded-For: 198.51.100.1\r\n" +
		"X-Custom: kept\r\n" +
		"\r\n"
	resp, body := dial(t, tp.addr).roundTrip(t, raw)
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("response = %d %q; want 200 \"ok\"", resp.StatusCode, body)
	}
	r := up.lastRequest()
	if r.RequestURI != target {
		t.Errorf("upstream target = %q; want %q byte for byte", r.RequestURI, target)
	}
	if r.Host != "example.test" {
		t.Errorf("upstream Host = %q; want the client's example.test", r.Host)
	}
	for _, h := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Te", "Upgrade"} {
		if v, ok := r.Header[h]; ok {
			t.Errorf("upstream got hop-by-hop header %s: %q; want it removed", h, v)
		}
	}
	// net/http keeps an incoming Connection header in Header unless it only
	// said close; anything there came from the proxy.
	if v := r.Header.Get("Connection"); v != "" {
		t.Errorf("upstream Connection = %q; want none", v)
	}
	if got, want := r.Header.Values("X-Forwarded-For"), []string{"203.0.113.7, 198.51.100.1, 127.0.0.1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("upstream X-Forwarded-For = %q; want %q", got, want)
	}
	if got := r.Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("upstream X-Forwarded-Proto = %q; want http", got)
	}
	if got := r.Header.Get("X-Forwarded-Host"); got != "example.test" {
		t.Errorf("upstream X-Forwarded-Host = %q; want example.test", got)
	}
	if got := r.Header.Get("X-Custom"); got != "kept" {
		t.Errorf("upstream X-Custom = %q; want kept", got)
	}
	if got := r.Header.Get("User-Agent"); got != "" {
		t.Errorf("upstream User-Agent = %q; want none (the client sent none)", got)
	}
}

func TestResponseHeaders(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = nil // suppress net/http's sniffing: the service sends none
		h.Set("Connection", "X-Up-Hop")
		h.Set("X-Up-Hop", "secret")
		h.Set("Keep-Alive", "timeout=1")
		h.Set("Server", "upstream/1")
		h.Set("Server-Timing", "db;dur=12")
		h.Set("X-Custom", "kept")
		io.WriteString(w, "hello")
	})
	tp := startProxy(t, up.URL, unbounded, nil)
	resp, body := doGet(t, tp.addr, "/")
	if body != "hello" {
		t.Fatalf("body = %q; want hello", body)
	}
	for _, h := range []string{"X-Up-Hop", "Keep-Alive", "Connection", "Content-Type"} {
		if v, ok := resp.Header[h]; ok {
			t.Errorf("client got %s: %q; want it absent", h, v)
		}
	}
	if got := resp.Header.Values("Server"); len(got) != 1 || got[0] != "upstream/1" {
		t.Errorf("client Server = %q; want only the upstream's", got)
	}
	if got := resp.Header.Get("X-Custom"); got != "kept" {
		t.Errorf("client X-Custom = %q; want kept", got)
	}
	timing := resp.Header.Values("Server-Timing")
	if len(timing) != 2 || timing[0] != "db;dur=12" {
		t.Fatalf("Server-Timing = %q; want the upstream's entry, then the proxy's", timing)
	}
	if !regexp.MustCompile(`^queue;dur=\d+\.\d{3}, upstream;dur=\d+\.\d{3}$`).MatchString(timing[1]) {
		t.Errorf("proxy Server-Timing = %q; want queue;dur=<ms>, upstream;dur=<ms>", timing[1])
	}
}

func TestConnectionCloseStaysOnItsSide(t *testing.T) {
	t.Run("client close keeps the upstream connection", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		tp := startProxy(t, up.URL, unbounded, nil)
		for range 3 {
			resp, _ := dial(t, tp.addr).roundTrip(t, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if !resp.Close {
				t.Errorf("client asked to close, but the response keeps the connection open")
			}
		}
		if n := up.conns.Load(); n != 1 {
			t.Errorf("upstream accepted %d connections for 3 requests from closing clients; want 1 (pooled)", n)
		}
	})
	t.Run("upstream close keeps the client connection", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "ok")
		})
		tp := startProxy(t, up.URL, unbounded, nil)
		c := dial(t, tp.addr)
		for i := range 3 {
			resp, body := c.roundTrip(t, get("/"))
			if resp.StatusCode != 200 || body != "ok" || resp.Close {
				t.Fatalf("request %d on one client connection: %d %q close=%v; want 200 ok, kept open", i, resp.StatusCode, body, resp.Close)
			}
		}
		if n := up.conns.Load(); n != 3 {
			t.Errorf("upstream accepted %d connections; want 3 (it closed each)", n)
		}
	})
}

func TestNoRetry(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		// Drop the connection without a response: fasthttp would retry an
		// idempotent GET five times by default.
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	})
	tp := startProxy(t, up.URL, unbounded, nil)
	resp, body := doGet(t, tp.addr, "/")
	if resp.StatusCode != 502 {
		t.Errorf("status = %d; want 502", resp.StatusCode)
	}
	if body != msgUpstreamError {
		t.Errorf("body = %q; want %q and no internal detail", body, msgUpstreamError)
	}
	if n := up.requests.Load(); n != 1 {
		t.Errorf("upstream saw %d requests; want 1 (no retry)", n)
	}
	o := tp.rec.wait(t, 1)[0]
	if o.Kind != UpstreamError || !o.Admitted {
		t.Errorf("outcome = %v admitted=%v; want upstream_error, admitted", o.Kind, o.Admitted)
	}
	// Reached, then dropped: an error, and no connect failure.
	var ce *ConnectError
	if o.UpstreamErr == nil || errors.As(o.UpstreamErr, &ce) {
		t.Errorf("outcome's UpstreamErr = %#v; want the reset, not a *ConnectError", o.UpstreamErr)
	}
	tp.waitIdle(t)
}

// TestUpstreamDown: nothing listens at the upstream's address. The
// client gets 502 and nothing of the error; the observer gets the error,
// a *ConnectError, which tells an upstream that is down from one that
// failed a request.
func TestUpstreamDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	tp := startProxy(t, "http://"+addr, limiter.Config{Mode: limiter.Fixed, Workers: 2}, nil)
	resp, body := doGet(t, tp.addr, "/")
	if resp.StatusCode != 502 || body != msgUpstreamError {
		t.Errorf("response = %d %q; want 502 %q", resp.StatusCode, body, msgUpstreamError)
	}
	if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "refused") {
		t.Errorf("body %q carries internal error text", body)
	}
	o := tp.rec.wait(t, 1)[0]
	var ce *ConnectError
	if o.Kind != UpstreamError || !errors.As(o.UpstreamErr, &ce) || !errors.Is(o.UpstreamErr, syscall.ECONNREFUSED) {
		t.Errorf("outcome = %v, UpstreamErr %v; want upstream_error, a *ConnectError of ECONNREFUSED", o.Kind, o.UpstreamErr)
	}
	tp.waitIdle(t)
}

func TestUpstreamTimeout(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, func(c *Config) {
		c.UpstreamTimeout = 200 * time.Millisecond
	})
	start := time.Now()
	resp, body := doGet(t, tp.addr, "/slow")
	if resp.StatusCode != 504 || body != msgUpstreamTimeout {
		t.Errorf("response = %d %q; want 504 %q", resp.StatusCode, body, msgUpstreamTimeout)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 3*time.Second {
		t.Errorf("504 after %v; want soon after the 200ms timeout", took)
	}
	o := tp.rec.wait(t, 1)[0]
	if o.Kind != UpstreamTimeout || o.Status != 504 {
		t.Errorf("outcome = %v %d; want upstream_timeout 504", o.Kind, o.Status)
	}
	tp.waitIdle(t) // the permit is back
}

func TestRejectionsNeverReachUpstream(t *testing.T) {
	hold := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-hold
		io.WriteString(w, "ok")
	})
	tests := []struct {
		name   string
		lcfg   limiter.Config
		busy   int // requests that occupy workers and queue first
		want   Kind
		minAge time.Duration
	}{
		{"queue full", limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 1, QueueTimeout: time.Minute}, 2, RejectedQueueFull, 0},
		{"queue timeout", limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 5, QueueTimeout: 150 * time.Millisecond}, 1, RejectedQueueTimeout, 150 * time.Millisecond},
		{"bulkhead", limiter.Config{Mode: limiter.Unbounded, Bulkhead: 1}, 1, RejectedBulkhead, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := startProxy(t, up.URL, tt.lcfg, nil)
			before := up.requests.Load()
			var wg sync.WaitGroup
			for range tt.busy {
				c := dial(t, tp.addr)
				io.WriteString(c, get("/busy"))
				wg.Go(func() { c.read(t, false) })
			}
			// The one admitted must have reached the upstream before the
			// rejection, or the count below could not tell them apart:
			// admission comes before the upstream's dial and read.
			waitFor(t, func() bool {
				s := tp.limiter.Stats()
				return s.InFlight+s.Queued == int64(tt.busy) && up.requests.Load()-before == 1
			})
			start := time.Now()
			resp, body := doGet(t, tp.addr, "/rejected")
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
				t.Errorf("response = %d Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if age := time.Since(start); age < tt.minAge {
				t.Errorf("rejected after %v; want after at least %v", age, tt.minAge)
			}
			if !strings.HasPrefix(body, "overloaded: ") {
				t.Errorf("body = %q; want a short reason", body)
			}
			if got := tp.rec.count(tt.want); got != 1 {
				t.Errorf("%v outcomes = %d; want 1", tt.want, got)
			}
			if n := up.requests.Load() - before; n != 1 {
				t.Errorf("upstream saw %d requests; want only the 1 admitted", n)
			}
			hold <- struct{}{}
			if tt.busy == 2 {
				hold <- struct{}{}
			}
			wg.Wait()
			tp.waitIdle(t)
		})
	}
}

func TestBulkheadCapsUpstreamConcurrency(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded, Bulkhead: 5}, nil)
	var wg sync.WaitGroup
	statuses := make(chan int, 20)
	for range 20 {
		wg.Go(func() {
			resp, _ := doGet(t, tp.addr, "/")
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	if most := up.most.Load(); most > 5 {
		t.Errorf("upstream saw %d requests at once; want at most 5", most)
	}
	if counts[200]+counts[503] != 20 || counts[503] != tp.rec.count(RejectedBulkhead) || counts[200] < 5 {
		t.Errorf("statuses %v, rejected_bulkhead outcomes %d; want 200s (at least 5) and 503s adding to 20, each 503 counted", counts, tp.rec.count(RejectedBulkhead))
	}
	tp.waitIdle(t)
}

func TestBadRequestsKeepTheProxyServing(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, unbounded, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	chunked := "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	for range 40 {
		chunked += fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("a", 64<<10))
	}
	chunked += "0\r\n\r\n"
	tests := []struct {
		name       string
		raw        string
		wantStatus int
	}{
		// fasthttp reads the first 8 KiB of a body before the handler runs,
		// so the client sends some, as any client does without Expect.
		{"declared body too large", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n" + strings.Repeat("a", 64<<10), 413},
		{"chunked body too large", chunked, 413},
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", MaxHeaderBytes) + "\r\n\r\n", 431},
		{"malformed request line", "GARBAGE\r\n\r\n", 400},
		{"bad content length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tp.rec.count(BadRequest)
			resp, body := dial(t, tp.addr).roundTrip(t, tt.raw)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d; want %d", resp.StatusCode, tt.wantStatus)
			}
			if strings.Contains(body, "fasthttp") || strings.Contains(body, "error when") {
				t.Errorf("body %q carries internal error text", body)
			}
			waitFor(t, func() bool { return tp.rec.count(BadRequest) == before+1 })
			if resp, body := doGet(t, tp.addr, "/after"); resp.StatusCode != 200 || body != "ok" {
				t.Errorf("after a bad request: %d %q; want the proxy still serving 200 ok", resp.StatusCode, body)
			}
		})
	}
	tp.waitIdle(t)
}

func TestExpectContinueTooLarge(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, unbounded, func(c *Config) { c.MaxBodyBytes = 100 })
	resp, body := dial(t, tp.addr).roundTrip(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
	if resp.StatusCode != 413 || body != msgBodyTooLarge || resp.Header.Get("Loomgate-Outcome") != "bad_request" || !resp.Close {
		t.Errorf("%d %q Loomgate-Outcome %q close %v; want 413 %q, bad_request, closed, before the body is sent",
			resp.StatusCode, body, resp.Header.Get("Loomgate-Outcome"), resp.Close, msgBodyTooLarge)
	}
	if n := up.requests.Load(); n != 0 {
		t.Errorf("upstream saw %d requests; want 0", n)
	}
	waitFor(t, func() bool { return tp.rec.count(BadRequest) == 1 })
}

func TestBodiesStream(t *testing.T) {
	t.Run("request", func(t *testing.T) {
		firstPart := make(chan struct{})
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 100<<10)
			if _, err := io.ReadFull(r.Body, buf); err != nil {
				t.Errorf("upstream read first part: %v", err)
			}
			close(firstPart) // the client has not sent the rest yet
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, 100<<10+n)
		})
		tp := startProxy(t, up.URL, unbounded, nil)
		c := dial(t, tp.addr)
		const size = 300 << 10
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
		c.Write(bytes.Repeat([]byte("x"), 100<<10))
		select {
		case <-firstPart:
		case <-time.After(5 * time.Second):
			t.Fatal("upstream did not see the first part of the body before the client sent the rest: the proxy buffers")
		}
		c.Write(bytes.Repeat([]byte("y"), size-100<<10))
		resp, body := c.read(t, false)
		if resp.StatusCode != 200 || body != fmt.Sprint(size) {
			t.Errorf("response = %d %q; want 200 %d", resp.StatusCode, body, size)
		}
	})
	t.Run("response", func(t *testing.T) {
		sent := make(chan struct{})
		more := make(chan struct{})
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(2<<20))
			w.Write(bytes.Repeat([]byte("a"), 1<<20))
			w.(http.Flusher).Flush()
			close(sent)
			<-more
			w.Write(bytes.Repeat([]byte("b"), 1<<20))
		})
		tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, nil)
		c := dial(t, tp.addr)
		io.WriteString(c, get("/big"))
		<-sent
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Fatalf("response headers did not arrive while the upstream held back half the body: %v", err)
		}
		first := make([]byte, 1<<20)
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatalf("first half did not arrive before the upstream sent the second: %v", err)
		}
		if s := tp.limiter.Stats(); s.InFlight != 1 {
			t.Errorf("in flight while the body is still streaming = %d; want 1 (the permit is held until the response is written)", s.InFlight)
		}
		close(more)
		rest, _ := io.ReadAll(resp.Body)
		if len(rest) != 1<<20 || rest[0] != 'b' {
			t.Errorf("second half: %d bytes; want 1 MiB of b", len(rest))
		}
		o := tp.rec.wait(t, 1)[0]
		if o.Kind != OK || o.Service < o.Total/2 {
			t.Errorf("outcome = %v, service %v of total %v; want ok with service to the last byte", o.Kind, o.Service, o.Total)
		}
		tp.waitIdle(t)
	})
}

func TestClientLeaves(t *testing.T) {
	hold := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-hold
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Minute}, nil)

	inFlight := dial(t, tp.addr)
	io.WriteString(inFlight, get("/in-flight"))
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 1 })
	queued := dial(t, tp.addr)
	io.WriteString(queued, get("/queued"))
	waitFor(t, func() bool { return tp.limiter.Stats().Queued == 1 })

	queued.Close()
	// The proxy notices the queued client leave without any worker freeing up.
	waitFor(t, func() bool { return tp.limiter.Stats().Queued == 0 })
	if o := tp.rec.wait(t, 1)[0]; o.Kind != ClientClosed || o.Admitted || !o.Admission {
		t.Errorf("queued client left: outcome %v admitted=%v; want client_closed, not admitted", o.Kind, o.Admitted)
	}

	inFlight.Close()
	time.Sleep(50 * time.Millisecond) // let the FIN arrive before the upstream answers
	close(hold)
	outcomes := tp.rec.wait(t, 2)
	if o := outcomes[1]; o.Kind != ClientClosed || !o.Admitted || o.Status != StatusClientClosed {
		t.Errorf("in-flight client left: outcome %v status %d admitted=%v; want client_closed 499, admitted", o.Kind, o.Status, o.Admitted)
	}
	if n := up.requests.Load(); n != 1 {
		t.Errorf("upstream saw %d requests; want 1 (the queued one never went)", n)
	}
	tp.waitIdle(t)
}

func TestHeadAndNoBodyStatuses(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.WriteHeader(304)
		default:
			w.Header().Set("Content-Length", "5")
			if r.Method != "HEAD" {
				io.WriteString(w, "hello")
			}
		}
	})
	tp := startProxy(t, up.URL, unbounded, nil)
	c := dial(t, tp.addr)
	resp, body := c.roundTrip(t, "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || resp.ContentLength != 5 || body != "" {
		t.Errorf("HEAD = %d length %d body %q; want 200, length 5, no body", resp.StatusCode, resp.ContentLength, body)
	}
	for _, code := range []int{204, 304} {
		resp, body := c.roundTrip(t, get(fmt.Sprintf("/%d", code)))
		if resp.StatusCode != code || body != "" {
			t.Errorf("GET /%d = %d %q; want %d, no body", code, resp.StatusCode, body, code)
		}
	}
	// The connection is still in step after all three.
	if resp, body := c.roundTrip(t, get("/")); resp.StatusCode != 200 || body != "hello" {
		t.Errorf("after HEAD, 204, 304: %d %q; want 200 hello", resp.StatusCode, body)
	}
	tp.waitIdle(t)
}

// panicAdmitter fails the way a bug would.
type panicAdmitter struct{ limiter.Policy }

func (panicAdmitter) Admit(time.Time, *limiter.Request) error      { panic("bug") }
func (panicAdmitter) Wait(context.Context, *limiter.Request) error { panic("bug") }

func TestPanicAnswers500(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, unbounded, func(c *Config) {
		c.Policy = panicAdmitter{c.Policy}
		c.Logger = discardLogger()
	})
	for range 2 {
		resp, body := doGet(t, tp.addr, "/")
		if resp.StatusCode != 500 || body != msgInternal {
			t.Errorf("response = %d %q; want 500 %q", resp.StatusCode, body, msgInternal)
		}
	}
	tp.rec.wait(t, 2)
	if n := tp.rec.count(InternalError); n != 2 {
		t.Errorf("internal_error outcomes = %d; want 2", n)
	}
}

func TestRetryAfterFromConfig(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded, Bulkhead: 1}, func(c *Config) {
		c.RetryAfter = func(k Kind) time.Duration { return 2100 * time.Millisecond }
		c.Policy = fullAdmitter{c.Policy}
	})
	resp, _ := doGet(t, tp.addr, "/")
	if got := resp.Header.Get("Retry-After"); got != "3" {
		t.Errorf("Retry-After = %q; want 3 (2.1s rounded up)", got)
	}
}

// fullAdmitter rejects every request, as a full bulkhead does.
type fullAdmitter struct{ limiter.Policy }

func (fullAdmitter) Admit(time.Time, *limiter.Request) error      { return limiter.ErrBulkheadFull }
func (fullAdmitter) Wait(context.Context, *limiter.Request) error { return limiter.ErrBulkheadFull }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestClientLeavesMidStream(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/huge" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(64<<20))
		chunk := bytes.Repeat([]byte("z"), 1<<20)
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, nil)
	c := dial(t, tp.addr)
	io.WriteString(c, get("/huge"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	c.Close() // 63 MiB still to come
	o := tp.rec.wait(t, 1)[0]
	if o.Kind != ClientClosed || o.Status != StatusClientClosed || !o.Admitted {
		t.Errorf("outcome = %v %d admitted=%v; want client_closed 499, admitted", o.Kind, o.Status, o.Admitted)
	}
	tp.waitIdle(t)
	// The single worker is free again.
	if resp, _ := doGet(t, tp.addr, "/"); resp.StatusCode != 200 {
		t.Errorf("after the client left: %d; want 200", resp.StatusCode)
	}
}

// TestUpstreamHostFromTheURL: a request with no Host of its own (HTTP/1.0)
// asks the upstream for the URL's host, read as a URL is: the scheme's
// case is no part of it.
func TestUpstreamHostFromTheURL(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	hostPort := strings.TrimPrefix(up.URL, "http://")
	tp := startProxy(t, "HTTP://"+hostPort, limiter.Config{Mode: limiter.Unbounded}, nil)
	resp, _ := dial(t, tp.addr).roundTrip(t, "GET /x HTTP/1.0\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d; want 200", resp.StatusCode)
	}
	if got := up.lastRequest().Host; got != hostPort {
		t.Errorf("upstream Host = %q; want %q", got, hostPort)
	}
}

// TestMaxBodyLimit: MaxBodyBytes is accepted up to MaxBodyLimit, 2 GiB,
// the most the sidecar's README documents, and not a byte beyond. 2 GiB
// itself was refused, a byte over a 32-bit int's most.
func TestMaxBodyLimit(t *testing.T) {
	lim, err := limiter.New(limiter.Config{Mode: limiter.Unbounded})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Upstream: "http://127.0.0.1:1", Policy: lim}
	for n, ok := range map[int64]bool{2 << 30: true, MaxBodyLimit + 1: false, -1: false, 0: true} {
		cfg.MaxBodyBytes = n
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("Validate with MaxBodyBytes %d = %v; want ok=%v", n, err, ok)
		}
	}
	cfg.MaxBodyBytes = MaxBodyLimit
	if _, err := New(cfg); err != nil {
		t.Errorf("New with MaxBodyBytes at MaxBodyLimit = %v", err)
	}
}

// TestShutdownWithNothingInFlightIsComplete: a drain whose time ends with
// no request queued or in flight was complete, whatever connection is
// still open (here one inside a request's headers, which HeaderTimeout
// would end long after): Shutdown returns nil, and only a drain that cut
// requests short reports ctx's error.
func TestShutdownWithNothingInFlightIsComplete(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 1, QueueTimeout: time.Minute}, func(c *Config) {
		c.HeaderTimeout = time.Minute
	})
	c := dial(t, tp.addr)
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: drain.test\r\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return tp.proxy.ClientConns() >= 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := tp.proxy.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with nothing queued or in flight = %v; want nil, a complete drain", err)
	}
	tp.rec.mu.Lock()
	n := len(tp.rec.outcomes)
	tp.rec.mu.Unlock()
	if n != 0 {
		t.Errorf("%d outcomes; want none: no request was made", n)
	}
}

// timeoutErr is a network error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestConnectErrorTimedOut(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{syscall.ECONNREFUSED, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH}, false},
		{fmt.Errorf("error when dialing 10.0.0.1:80: %w", fasthttp.ErrDialTimeout), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, true},
	} {
		if got := (&ConnectError{Err: tt.err}).TimedOut(); got != tt.want {
			t.Errorf("ConnectError{%v}.TimedOut() = %v; want %v", tt.err, got, tt.want)
		}
	}
}
