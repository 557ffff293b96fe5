package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// heldUpstream answers /slow only once release is called, and anything
// else at once; in is told of each /slow that arrived.
type heldUpstream struct {
	URL     string
	in      chan struct{}
	release func()
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	u := &heldUpstream{in: make(chan struct{}, 8), release: func() { once.Do(func() { close(gate) }) }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			u.in <- struct{}{}
			<-gate
		}
		io.WriteString(w, r.URL.Path)
	}))
	// Released before the server closes: Close waits for its handlers.
	t.Cleanup(srv.Close)
	t.Cleanup(u.release)
	u.URL = srv.URL
	return u
}

// TestRequestArrivingDuringTheOneBeforeIsAnswered: a client that sends
// its next request while the one before is still at the upstream (as a
// pipelining client does) gets both answers, without sending anything
// more. A request that arrives during another's handling must not be left
// for the idle timeout.
func TestRequestArrivingDuringTheOneBeforeIsAnswered(t *testing.T) {
	up := newHeldUpstream(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	c := dial(t, tp.addr)
	io.WriteString(c, get("/slow"))
	<-up.in
	io.WriteString(c, get("/fast"))
	time.Sleep(50 * time.Millisecond) // so that it is on the proxy's socket before the answer
	up.release()
	for _, want := range []string{"/slow", "/fast"} {
		if resp, body := c.read(t, false); resp.StatusCode != 200 || body != want {
			t.Fatalf("answer %d %q; want 200 %q", resp.StatusCode, body, want)
		}
	}
}

// TestPipelinedAnswerGoesBeforeTheNextIsReady: two requests in one write,
// the second held at the upstream until the client has the first answer.
// The first answer must not wait for the second.
func TestPipelinedAnswerGoesBeforeTheNextIsReady(t *testing.T) {
	up := newHeldUpstream(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	c := dial(t, tp.addr)
	io.WriteString(c, get("/fast")+get("/slow"))
	if resp, body := c.read(t, false); resp.StatusCode != 200 || body != "/fast" {
		t.Fatalf("first answer %d %q; want 200 /fast", resp.StatusCode, body)
	}
	up.release()
	if resp, body := c.read(t, false); resp.StatusCode != 200 || body != "/slow" {
		t.Fatalf("second answer %d %q; want 200 /slow", resp.StatusCode, body)
	}
}

// TestHalfClosedClientIsClosedAfterItsAnswer: a client that half-closes
// after its request gets the answer, and then the end of the connection,
// not an open connection until the idle timeout.
func TestHalfClosedClientIsClosedAfterItsAnswer(t *testing.T) {
	up := newHeldUpstream(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	for range 5 {
		c := dial(t, tp.addr)
		io.WriteString(c, get("/fast"))
		c.Conn.(*net.TCPConn).CloseWrite()
		if resp, body := c.read(t, false); resp.StatusCode != 200 || body != "/fast" {
			t.Fatalf("answer %d %q; want 200 /fast", resp.StatusCode, body)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("after the answer: %d bytes, %v; want the connection's end", n, err)
		}
	}
}
