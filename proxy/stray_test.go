package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// straying is an answer an upstream frames wrongly: the bytes after
// answer, sent at once or a little later, are no answer to any request.
type straying struct {
	name    string
	request string
	answer  string
	later   bool // the stray bytes come 100 ms after the answer
}

// strayAnswer is what a connection's next request would read as its own
// answer, were the connection taken again.
const strayAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\nNOT YOUR RESPONSE!"

// TestStrayBytesAreNobodysAnswer: an upstream that sends bytes past the end
// of an answer (after a 204, a 304 or an answer to HEAD, which have no
// body, or past a Content-Length, in a body buffered or streamed) has lost
// the connection's framing. Taken again, the connection would give the
// stray bytes to the next request, another client's, as its answer. It is
// closed instead, and the next request goes on a new connection and gets
// its own answer.
func TestStrayBytesAreNobodysAnswer(t *testing.T) {
	t.Parallel()
	large := strings.Repeat("b", ResponseBufferBytes+1)
	for _, tt := range []straying{
		{"204 then bytes", get("/first"), "HTTP/1.1 204 No Content\r\n\r\n", true},
		{"304 then bytes", get("/first"), "HTTP/1.1 304 Not Modified\r\n\r\n", true},
		{"HEAD then bytes", "HEAD /first HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n", true},
		{"204 and bytes", get("/first"), "HTTP/1.1 204 No Content\r\n\r\n", false},
		{"past Content-Length", get("/first"), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
		{"past Content-Length, later", get("/first"), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
		{"past a streamed body", get("/first"), fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(large), large), false},
	} {
		t.Run(tt.name, func(t *testing.T) { strayBytes(t, tt) })
	}
}

func strayBytes(t *testing.T, tt straying) {
	sent := make(chan struct{})
	up := newConnUpstream(t, func(u *connUpstream, c net.Conn, br *bufio.Reader) {
		for u.next(br) {
			if u.requests.Load() > 1 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nmine")
				continue
			}
			io.WriteString(c, tt.answer)
			if tt.later {
				time.Sleep(100 * time.Millisecond)
			}
			io.WriteString(c, strayAnswer)
			close(sent)
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	if resp, _ := dial(t, tp.addr).roundTrip(t, tt.request); resp.StatusCode >= 300 && resp.StatusCode != 304 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	<-sent
	time.Sleep(50 * time.Millisecond) // the stray bytes are in, on loopback
	resp, body := dial(t, tp.addr).roundTrip(t, get("/second"))
	if resp.StatusCode != 200 || body != "mine" {
		if len(body) > 40 {
			body = body[:40] + "..."
		}
		t.Errorf("the next client got %d %q; want 200 %q, its own answer", resp.StatusCode, body, "mine")
	}
	for _, o := range tp.rec.wait(t, 2) {
		if o.Kind != OK {
			t.Errorf("outcome %v %d for %s; want ok", o.Kind, o.Status, o.Method)
		}
	}
	tp.waitIdle(t)
}
