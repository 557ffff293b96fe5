package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// "Expect: 100-continue" asks before uploading: loomgate answers 100 only
// once the request is admitted, and a request it will not forward is
// answered at once, its body never asked for.

const expectUpload = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n"

// readStatusLine reads one status line and its header block from r.
func readInterim(t *testing.T, c net.Conn, r *bufio.Reader, within time.Duration) (status string, timedOut bool) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	line, err := r.ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "", true
	}
	if err != nil {
		t.Fatalf("reading a status line: %v", err)
	}
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading a header block: %v", err)
		}
		if h == "\r\n" {
			break
		}
	}
	return strings.TrimSpace(line), false
}

func TestExpectContinueOnlyOnceAdmitted(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Body", itoa(n))
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 1, QueueTimeout: time.Minute}, nil)
	holder := dial(t, tp.addr)
	io.WriteString(holder, get("/hold"))
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 1 })

	waiter := dial(t, tp.addr)
	io.WriteString(waiter, expectUpload)
	waitFor(t, func() bool { return tp.limiter.Stats().Queued == 1 })

	t.Run("queue full: rejected at once, body never asked for", func(t *testing.T) {
		c := dial(t, tp.addr)
		io.WriteString(c, expectUpload)
		status, timedOut := readInterim(t, c, c.r, 5*time.Second)
		if timedOut || !strings.Contains(status, " 503 ") {
			t.Fatalf("first answer %q (timed out %v); want 503 before any body, no 100 Continue", status, timedOut)
		}
	})
	t.Run("queued: no 100 while waiting", func(t *testing.T) {
		if status, timedOut := readInterim(t, waiter, waiter.r, 300*time.Millisecond); !timedOut {
			t.Fatalf("queued request got %q; want nothing until admitted", status)
		}
	})
	close(release)
	if resp, body := holder.read(t, false); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("holder: %d %q", resp.StatusCode, body)
	}
	if status, timedOut := readInterim(t, waiter, waiter.r, 5*time.Second); timedOut || !strings.Contains(status, " 100 ") {
		t.Fatalf("admitted request got %q (timed out %v); want 100 Continue", status, timedOut)
	}
	io.WriteString(waiter, strings.Repeat("a", 20000))
	resp, body := waiter.read(t, false)
	if resp.StatusCode != 200 || body != "ok" || resp.Header.Get("X-Body") != "20000" {
		t.Errorf("after 100: %d %q, upstream read %s bytes; want 200 ok, 20000", resp.StatusCode, body, resp.Header.Get("X-Body"))
	}
	tp.waitIdle(t)
}

func TestExpectContinueRejectedAnswers(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, unbounded, func(c *Config) {
		c.Policy = fullAdmitter{c.Policy}
		c.RejectStatus = http.StatusTooManyRequests
	})
	c := dial(t, tp.addr)
	resp, body := c.roundTrip(t, expectUpload)
	if resp.StatusCode != 429 || body != msgBulkheadFull || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("Loomgate-Outcome") != "rejected_bulkhead" || !resp.Close {
		t.Errorf("%d %q Retry-After %q Loomgate-Outcome %q close %v; want 429 %q, Retry-After, rejected_bulkhead, closed",
			resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Header.Get("Loomgate-Outcome"), resp.Close, msgBulkheadFull)
	}
	if o := tp.rec.wait(t, 1)[0]; o.Kind != RejectedBulkhead || o.Status != 429 {
		t.Errorf("outcome %v %d; want rejected_bulkhead 429", o.Kind, o.Status)
	}
	if n := up.requests.Load(); n != 0 {
		t.Errorf("upstream saw %d requests; want none", n)
	}
}

// TestExpectContinueClientFailsAfter100: a client admitted and told to
// continue that then leaves, or stalls, must not keep its permit.
func TestExpectContinueClientFailsAfter100(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1}, func(c *Config) {
		c.HeaderTimeout = 300 * time.Millisecond
		c.Logger = discardLogger()
	})
	for i, tt := range []struct {
		name string
		then func(net.Conn)
		kind Kind
	}{
		{"closes", func(c net.Conn) { c.Close() }, ClientClosed},
		{"stalls", func(net.Conn) {}, ClientTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, tp.addr)
			io.WriteString(c, expectUpload)
			if status, timedOut := readInterim(t, c, c.r, 5*time.Second); timedOut || !strings.Contains(status, " 100 ") {
				t.Fatalf("got %q (timed out %v); want 100 Continue", status, timedOut)
			}
			tt.then(c)
			if o := tp.rec.wait(t, i+1)[i]; o.Kind != tt.kind {
				t.Errorf("outcome %v; want %v", o.Kind, tt.kind)
			}
			tp.waitIdle(t)
		})
	}
	if n := up.requests.Load(); n != 0 {
		t.Errorf("upstream saw %d requests; want none", n)
	}
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func TestExpectContinuePanicAnswers500(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := startProxy(t, up.URL, unbounded, func(c *Config) {
		c.Policy = panicAdmitter{c.Policy}
		c.Logger = discardLogger()
	})
	resp, body := dial(t, tp.addr).roundTrip(t, expectUpload)
	if resp.StatusCode != 500 || body != msgInternal || resp.Header.Get("Loomgate-Outcome") != "internal_error" {
		t.Errorf("%d %q %q; want 500 %q internal_error", resp.StatusCode, body, resp.Header.Get("Loomgate-Outcome"), msgInternal)
	}
	if o := tp.rec.wait(t, 1)[0]; o.Kind != InternalError {
		t.Errorf("outcome %v; want internal_error", o.Kind)
	}
}
