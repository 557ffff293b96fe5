package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// Each request's outcome names who was at fault: a client that leaves or
// stalls is never counted against the upstream, and a client that stays
// is never counted as gone.

// closeWrite half-closes c: the client sends no more, but still reads.
func closeWrite(t *testing.T, c net.Conn) {
	t.Helper()
	if rc, ok := c.(*rawConn); ok {
		c = rc.Conn
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// reset closes c with a reset (RST), not a FIN: a client that crashed or
// gave up with SO_LINGER 0.
func reset(t *testing.T, c net.Conn) {
	t.Helper()
	if rc, ok := c.(*rawConn); ok {
		c = rc.Conn
	}
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestAbandonedUploadIsTheClients: a client that stops sending a
// Content-Length body, by closing, half-closing or resetting its connection,
// or that resets it inside its header block, is counted client_closed.
func TestAbandonedUploadIsTheClients(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 2}, func(c *Config) { c.Logger = discardLogger() })
	for _, tt := range []struct {
		name string
		size int // declared
		sent int
		end  func(*testing.T, net.Conn)
	}{
		{"close past the first 8 KiB", 20000, 9000, func(_ *testing.T, c net.Conn) { c.Close() }},
		{"half-close past the first 8 KiB", 20000, 9000, closeWrite},
		{"close within the first 8 KiB", 5000, 3000, func(_ *testing.T, c net.Conn) { c.Close() }},
		{"half-close within the first 8 KiB", 5000, 3000, closeWrite},
		{"reset within the first 8 KiB", 5000, 3000, reset},
		{"reset inside the header block", -1, 0, reset},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tp.rec.wait(t, 0))
			c := dial(t, tp.addr)
			if tt.size < 0 {
				io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nX-Unfinished: ")
			} else {
				fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", tt.size, strings.Repeat("a", tt.sent))
			}
			time.Sleep(20 * time.Millisecond) // the first part is on its way upstream
			tt.end(t, c)
			o := tp.rec.wait(t, before+1)[before]
			if o.Kind != ClientClosed || o.Status != StatusClientClosed {
				t.Errorf("outcome %v %d; want client_closed 499", o.Kind, o.Status)
			}
			tp.waitIdle(t)
		})
	}
}

// TestHalfClosedClientIsServed: a client that half-closes once its request
// is sent still reads (RFC 9112, 9.6); it gets its response, and the
// request counts ok.
func TestHalfClosedClientIsServed(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(50 * time.Millisecond) // the FIN arrives while the upstream works
		fmt.Fprintf(w, "ok %d", len(b))
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 2}, nil)
	for i, raw := range []string{
		get("/half"),
		"POST /half HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST /half HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + strings.Repeat("a", 20000),
	} {
		c := dial(t, tp.addr)
		io.WriteString(c, raw)
		closeWrite(t, c)
		resp, body := c.read(t, false)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "ok") {
			t.Errorf("request %d: %d %q; want 200 ok", i, resp.StatusCode, body)
		}
		o := tp.rec.wait(t, i+1)[i]
		if o.Kind != OK || o.Status != 200 {
			t.Errorf("request %d: outcome %v %d; want ok 200", i, o.Kind, o.Status)
		}
	}
	tp.waitIdle(t)
}

// TestSlowReaderTimesOut: a client that stops reading its response is cut
// at the write timeout (UpstreamTimeout). It stalled; it did not leave.
func TestSlowReaderTimesOut(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(256<<20))
		chunk := make([]byte, 1<<20)
		for range 256 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, func(c *Config) {
		c.UpstreamTimeout = 700 * time.Millisecond
	})
	c := dial(t, tp.addr)
	io.WriteString(c, get("/big"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatal(err)
	}
	// Reads nothing more, and keeps the connection open.
	o := tp.rec.wait(t, 1)[0]
	if o.Kind != ClientTimeout || !o.Admitted {
		t.Errorf("outcome %v admitted=%v; want client_timeout, admitted", o.Kind, o.Admitted)
	}
	tp.waitIdle(t)
}
