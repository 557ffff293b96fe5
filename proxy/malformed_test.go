package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// malformedCases are requests that must be answered by the proxy itself,
// never forwarded, each with the status RFC 9110 and RFC 9112 call for and
// the outcome it is counted under. Each arrives on a fresh connection.
var malformedCases = []struct {
	name   string
	raw    string
	status int
	kind   Kind
}{
	{"space in a header name", "GET / HTTP/1.1\r\nHost: x\r\nX A: 1\r\n\r\n", 400, BadRequest},
	{"space before the colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, BadRequest},
	{"NUL in a header value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, BadRequest},
	{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405, BadRequest},
	{"HTTP/2.0 on an HTTP/1 connection", "GET /a HTTP/2.0\r\nHost: x\r\n\r\n", 505, BadRequest},
	{"HTTP/3.0", "GET /a HTTP/3.0\r\nHost: x\r\n\r\n", 505, BadRequest},
	{"not a version", "GET /a HTTP/x\r\nHost: x\r\n\r\n", 400, BadRequest},
	{"no Host in HTTP/1.1", "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n", 400, BadRequest},
	{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, BadRequest},
	{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400, BadRequest},
	{"two different Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400, BadRequest},
	{"negative Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, BadRequest},
	{"Content-Length not a number", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3a\r\n\r\nabc", 400, BadRequest},
	// RFC 9112 (6.1): chunked in HTTP/1.0 is faulty framing, not a coding
	// the server lacks.
	{"HTTP/1.0 with chunked", "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400, BadRequest},
	{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 501, BadRequest},
	// fasthttp reads "identity" as no body: what follows would be read as
	// the next request, and forwarded.
	{"identity transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 501, BadRequest},
	{"bad chunk size", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400, BadRequest},
	{"bad method token", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, BadRequest},
	{"two spaces in the request line", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, BadRequest},
	{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 9000) + "\r\n\r\n", 431, BadRequest},
}

func TestMalformedRequestsAreAnsweredNotForwarded(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	for i, tt := range malformedCases {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tt.raw)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d %q; want %d", resp.StatusCode, body, tt.status)
			}
			if (tt.status == 400 || tt.status == 501) && !resp.Close {
				t.Errorf("status %d without Connection: close; want the connection closed after faulty framing", tt.status)
			}
			o := tp.rec.wait(t, i+1)[i]
			if o.Kind != tt.kind || o.Status != tt.status {
				t.Errorf("outcome %v %d; want %v %d", o.Kind, o.Status, tt.kind, tt.status)
			}
		})
		if n := up.requests.Load(); n != 0 {
			t.Fatalf("after %q the upstream has seen %d requests; want none", tt.name, n)
		}
	}
}

// TestMalformedStreamedBody: a body that turns malformed past the first
// 8 KiB is found out while it streams to the upstream, which has seen its
// start; the client still gets 400 and the count is bad_request, not the
// client_closed or upstream_error it would otherwise read as.
func TestMalformedStreamedBody(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	c := dial(t, tp.addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2400\r\n"+strings.Repeat("a", 0x2400)+"\r\nzz\r\n")
	resp, body := c.read(t, false)
	if resp.StatusCode != 400 || body != msgMalformed || !resp.Close {
		t.Errorf("%d %q close=%v; want 400 %q and the connection closed", resp.StatusCode, body, resp.Close, msgMalformed)
	}
	if o := tp.rec.wait(t, 1)[0]; o.Kind != BadRequest || o.Status != 400 {
		t.Errorf("outcome %v %d; want bad_request 400", o.Kind, o.Status)
	}
	tp.waitIdle(t)
}

// TestAwkwardButValidRequests are requests HTTP allows that a careful
// proxy forwards intact.
func TestAwkwardButValidRequests(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Got", strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(b)+" "+r.Host+" "+r.Header.Get("X-A")))
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, nil)
	tests := []struct {
		name, raw, want string
	}{
		// A client cannot make the proxy drop the framing of its own body.
		{"Connection names Content-Length", "POST /a HTTP/1.1\r\nHost: x\r\nConnection: Content-Length\r\nContent-Length: 3\r\n\r\nabc", "POST /a abc x"},
		{"Connection names Transfer-Encoding", "POST /a HTTP/1.1\r\nHost: x\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "POST /a abc x"},
		{"Connection names Host", "GET /h HTTP/1.1\r\nHost: x\r\nConnection: Host\r\n\r\n", "GET /h  x"},
		{"absolute-form target", "GET http://x/abs?q=1 HTTP/1.1\r\nHost: x\r\n\r\n", "GET /abs?q=1  x"},
		{"HTTP/1.2 is 1.1", "GET /v HTTP/1.2\r\nHost: x\r\n\r\n", "GET /v  x"},
		// RFC 9112 (5.2) lets a proxy replace obs-fold with a space.
		{"obsolete line folding", "GET /f HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n continued\r\n\r\n", "GET /f  x 1 continued"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, tp.addr)
			io.WriteString(c, tt.raw)
			resp, body := c.read(t, false)
			if resp.StatusCode != 200 || body != "ok" || resp.Header.Get("X-Got") != tt.want {
				t.Errorf("%d %q, upstream got %q; want 200 ok and %q", resp.StatusCode, body, resp.Header.Get("X-Got"), tt.want)
			}
		})
	}
}

// TestUnhandledRequestsRecord: requests answered before the handler runs,
// whose request fasthttp has reset by then: a small body that stalls past
// HeaderTimeout, and a header block it refused. They were logged as
// "GET /" whatever was sent, with no remote address and a Total of 0 for a
// client held the whole HeaderTimeout, and their answers carried a Date
// loomgate made itself. Now the method and target are left empty, as
// unknown, rather than made up; the remote is the client's; a
// connection's first request is timed from the connection's start; and
// no Date is added.
func TestUnhandledRequestsRecord(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.HeaderTimeout = 300 * time.Millisecond
		c.Logger = discardLogger()
	})
	cases := []struct {
		raw    string
		status int
		least  time.Duration
	}{
		{"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc", 408, 250 * time.Millisecond},
		{"DELETE /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400, 0},
	}
	for i, tt := range cases {
		c := dial(t, tp.addr)
		io.WriteString(c, tt.raw)
		resp, _ := c.read(t, false)
		if resp.StatusCode != tt.status || resp.Header.Get("Date") != "" {
			t.Errorf("%q: %d with Date %q; want %d and no Date", tt.raw, resp.StatusCode, resp.Header.Get("Date"), tt.status)
		}
		o := tp.rec.wait(t, i+1)[i]
		if len(o.Method) != 0 || len(o.Target) != 0 {
			t.Errorf("%q: recorded as %q %q; want both empty, unknown", tt.raw, o.Method, o.Target)
		}
		if o.Remote == nil || o.Remote.String() != c.LocalAddr().String() {
			t.Errorf("%q: remote %v; want %v", tt.raw, o.Remote, c.LocalAddr())
		}
		if o.Total < tt.least || o.Total > 5*time.Second {
			t.Errorf("%q: total %v; want %v to 5s", tt.raw, o.Total, tt.least)
		}
	}
}
