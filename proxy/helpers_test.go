package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// upstream is a real HTTP server on loopback that records what reaches it.
type upstream struct {
	URL      string
	srv      *http.Server
	conns    atomic.Int64 // connections accepted
	requests atomic.Int64
	now      atomic.Int64 // requests being handled
	most     atomic.Int64 // highest now

	mu   sync.Mutex
	last *http.Request
}

func newUpstream(t *testing.T, handler http.HandlerFunc) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{URL: "http://" + ln.Addr().String()}
	u.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.requests.Add(1)
			n := u.now.Add(1)
			for {
				m := u.most.Load()
				if n <= m || u.most.CompareAndSwap(m, n) {
					break
				}
			}
			defer u.now.Add(-1)
			u.mu.Lock()
			u.last = r
			u.mu.Unlock()
			handler(w, r)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				u.conns.Add(1)
			}
		},
	}
	go u.srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		u.srv.Shutdown(ctx)
	})
	return u
}

func (u *upstream) lastRequest() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// recorder is an Observer that keeps copies of every Outcome.
type recorder struct {
	mu       sync.Mutex
	outcomes []Outcome
	arrived  chan struct{}
}

func newRecorder() *recorder { return &recorder{arrived: make(chan struct{}, 10000)} }

func (r *recorder) Observe(o *Outcome) {
	c := *o
	c.Method = append([]byte(nil), o.Method...)
	c.Target = append([]byte(nil), o.Target...)
	r.mu.Lock()
	r.outcomes = append(r.outcomes, c)
	r.mu.Unlock()
	r.arrived <- struct{}{}
}

// wait returns once n Outcomes have arrived in all, or fails the test.
func (r *recorder) wait(t *testing.T, n int) []Outcome {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.outcomes)
		r.mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("%d outcomes after 10s; want %d", got, n)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Outcome(nil), r.outcomes...)
}

func (r *recorder) count(k Kind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.outcomes {
		if o.Kind == k {
			n++
		}
	}
	return n
}

type testProxy struct {
	addr    string
	limiter *limiter.Limiter
	rec     *recorder
	proxy   *Proxy
}

// startProxy runs a Proxy on loopback in front of upstreamURL.
func startProxy(t *testing.T, upstreamURL string, lcfg limiter.Config, edit func(*Config)) *testProxy {
	t.Helper()
	lim, err := limiter.New(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	cfg := Config{
		Upstream:        upstreamURL,
		Policy:          lim,
		Observer:        rec,
		UpstreamTimeout: 5 * time.Second,
		MaxConns:        lim.Stats().Limit,
		ServerTiming:    true,
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return &testProxy{addr: ln.Addr().String(), limiter: lim, rec: rec, proxy: p}
}

// waitIdle fails the test unless the limiter empties: the permit-leak check.
func (tp *testProxy) waitIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := tp.limiter.Stats()
		if s.InFlight == 0 && s.Queued == 0 && s.Bytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limiter not idle after 10s: %+v (a leaked permit)", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawConn is a client connection on which a test writes exact bytes.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// roundTrip writes raw and reads one response, with its body.
func (c *rawConn) roundTrip(t *testing.T, raw string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	return c.read(t, strings.HasPrefix(raw, "HEAD "))
}

func (c *rawConn) read(t *testing.T, head bool) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	method := "GET"
	if head {
		method = "HEAD"
	}
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

func get(path string) string {
	return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: test.local\r\n\r\n", path)
}

// doGet sends one GET on a new connection.
func doGet(t *testing.T, addr, path string) (*http.Response, string) {
	t.Helper()
	return dial(t, addr).roundTrip(t, get(path))
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The texts of the answers every protocol gives (admission.Gate.Answer),
// as a client reads them.
const (
	msgBodyTooLarge    = "request body too large\n"
	msgBulkheadFull    = "overloaded: bulkhead full\n"
	msgInternal        = "internal error\n"
	msgUpstreamError   = "bad gateway: upstream unavailable\n"
	msgUpstreamTimeout = "gateway timeout: upstream too slow\n"
)
