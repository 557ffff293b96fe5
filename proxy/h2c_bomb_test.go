package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/loomgate/loomgate/internal/h2raw"
	"github.com/loomgate/loomgate/limiter"
)

// TestH2CContinuationFlood: a header block that never ends, CONTINUATION
// after CONTINUATION of fields of 1 KiB (CVE-2024-27316's flood), is
// read only so far: the connection is ended once the block is well past
// the header limit, long before the 64 MiB the client would send, and
// nothing of it reaches the upstream. The next client is served.
func TestH2CContinuationFlood(t *testing.T) {
	up, reached := countingUpstream(t)
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	c, err := h2raw.Dial(tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.Block(
		":method", "GET", ":scheme", "http", ":authority", "flood.test", ":path", "/flood")})
	read := make(chan h2raw.Read, 1)
	go func() { read <- c.ReadAll(30 * time.Second) }()

	const limit = 64 << 20
	value := strings.Repeat("v", 1000)
	sent := 0
	var werr error
	for i := 0; sent < limit; i++ {
		// Fields never indexed: each one costs the decoder its length.
		frag := c.Block(fmt.Sprintf("x-flood-%d", i), value)
		c.Framer.WriteContinuation(1, false, frag)
		if i%16 == 15 {
			if werr = c.Flush(); werr != nil {
				break
			}
		}
		sent += 9 + len(frag)
	}
	got := <-read
	if werr == nil {
		t.Fatalf("%d MiB of one header block all taken; want the connection ended well before", sent>>20)
	}
	if !got.Ended {
		t.Errorf("the connection did not end; want it ended")
	}
	t.Logf("ended after %d KiB sent (%v), GOAWAY %s", sent>>10, werr, goAwayText(got.GoAway))
	if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY %s; want PROTOCOL_ERROR, Go's server's bound on a block it will discard", goAwayText(got.GoAway))
	}
	// The kernel's buffers take some megabytes of what was sent after
	// the server stopped reading; the server read no more than a few
	// times the header limit.
	if sent > 16<<20 {
		t.Errorf("%d MiB sent before the connection ended; want it ended within a few", sent>>20)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream got %d requests; want none", n)
	}
	assertServed(t, tp.addr)
}

// TestH2CHPACKBomb: one-byte references to a 4 KiB entry of the
// connection's HPACK table (a decompression bomb: 40 MiB of fields from
// 10 KiB on the wire). In one frame, the stream is answered 431 and never
// forwarded, and the streams beside it on the connection are answered.
// Carried on into a CONTINUATION frame, past the header limit, the
// connection is ended (PROTOCOL_ERROR, Go's server's bound on a block it
// will discard), and the bomb is not forwarded. The next client is served.
func TestH2CHPACKBomb(t *testing.T) {
	up, reached := countingUpstream(t)
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	// armed is a connection on which stream 1 has put the field in the
	// table (the encoder indexes it), and the bomb's block: 10,000
	// references to it, a byte each.
	armed := func(t *testing.T) (*h2raw.Conn, []byte) {
		c, err := h2raw.Dial(tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		big := strings.Repeat("b", 4000)
		c.Get(1, "/seed", "x-bomb", big)
		fields := []string{":method", "GET", ":scheme", "http", ":authority", "h2raw.test", ":path", "/bomb"}
		for range 10000 {
			fields = append(fields, "x-bomb", big)
		}
		return c, c.Block(fields...)
	}

	t.Run("one frame", func(t *testing.T) {
		c, block := armed(t)
		if len(block) > 16<<10 {
			t.Fatalf("the bomb's block is %d bytes; want one frame's worth", len(block))
		}
		c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndStream: true, EndHeaders: true})
		c.Get(5, "/after")
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		got := c.ReadAll(2 * time.Second)
		for id, want := range map[uint32]string{1: "200", 3: "431", 5: "200"} {
			if s := h2raw.Field(got.Headers[id], ":status"); s != want {
				t.Errorf("stream %d: status %q (GOAWAY %s); want %s", id, s, goAwayText(got.GoAway), want)
			}
		}
		if n := reached.Load(); n != 2 {
			t.Errorf("the upstream got %d requests; want 2, the seed and the one after", n)
		}
	})

	t.Run("continued", func(t *testing.T) {
		reached.Store(0)
		c, block := armed(t)
		c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block[:4096], EndStream: true})
		c.Framer.WriteContinuation(3, true, block[4096:])
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		got := c.ReadAll(5 * time.Second)
		if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeProtocol || !got.Ended {
			t.Errorf("GOAWAY %s, ended %v; want PROTOCOL_ERROR and the connection closed", goAwayText(got.GoAway), got.Ended)
		}
		if h := got.Headers[3]; h != nil {
			t.Errorf("the bomb's stream was answered %v; want the connection ended instead", h)
		}
		// The seed may or may not be forwarded before the connection
		// ends; the bomb never is.
		if n := reached.Load(); n > 1 {
			t.Errorf("the upstream got %d requests; want the seed at most", n)
		}
	})
	assertServed(t, tp.addr)
}

// countingUpstream is an h2c upstream that answers "ok" and counts the
// requests that reach it.
func countingUpstream(t *testing.T) (string, *atomic.Int64) {
	reached := new(atomic.Int64)
	return h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Write([]byte("ok"))
	}), reached
}

// assertServed fails unless a new h2c client is answered 200.
func assertServed(t *testing.T, addr string) {
	t.Helper()
	resp, err := h2cClient().Get("http://" + addr + "/next")
	if err != nil {
		t.Fatalf("the next client: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the next client: %s; want 200", resp.Status)
	}
}

// goAwayText is a GOAWAY's code, or "none". (Its debug data is the
// framer's buffer, gone once the next frame is read.)
func goAwayText(f *http2.GoAwayFrame) string {
	if f == nil {
		return "none"
	}
	return f.ErrCode.String()
}
