package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/loomgate/loomgate/internal/h2raw"
	"github.com/loomgate/loomgate/limiter"
)

// kindCounter is an Observer that counts outcomes by kind, apart for
// targets with a prefix; it never blocks, whatever the flood.
type kindCounter struct {
	prefix      []byte
	kinds, rest [NumKindsForTest]atomic.Int64
	admission   atomic.Int64 // outcomes under prefix that met admission
}

// NumKindsForTest is every Kind's count.
const NumKindsForTest = int(ClientReset) + 3

func (k *kindCounter) Observe(o *Outcome) {
	if bytes.HasPrefix(o.Target, k.prefix) {
		k.kinds[o.Kind].Add(1)
		if o.Admission {
			k.admission.Add(1)
		}
		return
	}
	k.rest[o.Kind].Add(1)
}

// attack opens connections to addr one after another, and on each sends
// streams opened and reset at once (HEADERS, then its RST_STREAM), 50 such
// pairs in a write every 2 ms (25,000 a second) until the server ends it
// with a GOAWAY; for d in all. It returns the streams sent, the
// connections opened, and the GOAWAY codes the server sent.
func attack(t *testing.T, addr string, d time.Duration) (streams, conns int, goAways []http2.ErrCode) {
	end := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		c, err := h2raw.Dial(addr)
		if err != nil {
			t.Errorf("attacker's dial: %v", err)
			return
		}
		conns++
		read := make(chan h2raw.Read, 1)
		var told atomic.Bool
		go func() {
			r := c.ReadAll(d + 10*time.Second)
			told.Store(true)
			read <- r
		}()
		for id := uint32(1); time.Now().Before(end) && !told.Load(); <-tick.C {
			for range 50 {
				c.Get(id, fmt.Sprintf("/attack/%d", id))
				c.Reset(id)
				id += 2
				streams++
			}
			if c.Flush() != nil {
				break
			}
		}
		c.Conn.(*net.TCPConn).CloseWrite()
		if r := <-read; r.GoAway != nil {
			goAways = append(goAways, r.GoAway.ErrCode)
		}
		c.Close()
	}
	return streams, conns, goAways
}

// medianLatency sends n GETs of path, one after another, on client, and
// returns the median of their times.
func medianLatency(t *testing.T, client *http.Client, url string, n int) time.Duration {
	t.Helper()
	times := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", url, resp.Status)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	return times[n/2]
}

// TestRapidReset: HTTP/2 streams opened and reset at once (CVE-2023-44487),
// on connection after connection, against a fixed pool of 10. None reaches
// the upstream: each is heard reset before it is forwarded, counted
// client_reset, outside admission's figures. Each connection gets a GOAWAY
// (ENHANCE_YOUR_CALM) once past its budget of resets; and another client's
// median stays within twice what it was before. The upstream received a
// third of 1.04 M such streams in 15 s, through the 10 workers; no GOAWAY;
// every one counted client_closed, in the advice's window; the other
// client's median went from 3 to 40-55 ms.
func TestRapidReset(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack of some seconds")
	}
	var reached atomic.Int64
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/attack/") {
			reached.Add(1)
		}
		time.Sleep(20 * time.Millisecond)
		w.Write([]byte("ok"))
	})
	counts := &kindCounter{prefix: []byte("/attack/")}
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Fixed, Workers: 10, QueueSize: 1000, QueueTimeout: 10 * time.Second}, func(c *Config) {
		c.Observer = counts
		c.Logger = discardLogger()
	})
	other := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + tp.addr + "/other"
	idle := medianLatency(t, other, url, 30)

	var streams, conns int
	var goAways []http2.ErrCode
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 2 {
		wg.Go(func() {
			n, c, g := attack(t, tp.addr, 4*time.Second)
			mu.Lock()
			streams += n
			conns += c
			goAways = append(goAways, g...)
			mu.Unlock()
		})
	}
	time.Sleep(500 * time.Millisecond)
	during := medianLatency(t, other, url, 30)
	wg.Wait()

	t.Logf("%d streams opened and reset on %d connections, %d ended by a GOAWAY; %d reached the upstream; client_reset %d, client_closed %d; the other client's median %v idle, %v under attack",
		streams, conns, len(goAways), reached.Load(), counts.kinds[ClientReset].Load(), counts.kinds[ClientClosed].Load(), idle, during)
	if n := reached.Load(); n != 0 {
		t.Errorf("%d reset streams reached the upstream; want none", n)
	}
	if len(goAways) < conns-2 {
		t.Errorf("%d GOAWAYs on %d connections; want each connection but those the attack's end cut short ended past its budget", len(goAways), conns)
	}
	for _, code := range goAways {
		if code != http2.ErrCodeEnhanceYourCalm {
			t.Errorf("GOAWAY %v; want ENHANCE_YOUR_CALM", code)
		}
	}
	if counts.kinds[ClientReset].Load() == 0 {
		t.Error("no stream counted client_reset")
	}
	for k := range NumKindsForTest {
		if n := counts.kinds[k].Load(); n > 0 && Kind(k) != ClientReset && Kind(k) != ClientClosed {
			t.Errorf("%d attack streams counted %v; want client_reset (or client_closed, left while queued)", n, Kind(k))
		}
	}
	if n := counts.admission.Load(); n > counts.kinds[ClientClosed].Load() {
		t.Errorf("%d attack streams counted as having met admission; want only those that left the queue (%d)", n, counts.kinds[ClientClosed].Load())
	}
	// The race detector slows the proxy's every step many times, and the
	// attack's pace stays the same.
	if during > 2*idle && !raceEnabled {
		t.Errorf("the other client's median went from %v to %v under the attack; want at most twice", idle, during)
	}
	tp.waitIdle(t)
}

// TestH2CHeaderBlockTimeout: a header block left open (HEADERS without
// END_HEADERS, no CONTINUATION) is answered 408 on its stream, with
// Loomgate-Outcome, counted client_timeout once, and its connection ended
// with a GOAWAY, at HEADER_TIMEOUT, as a header block on HTTP/1.1 is. It
// was held until Go's idle timeout, 90 s, answered nothing and counted
// nothing.
func TestH2CHeaderBlockTimeout(t *testing.T) {
	t.Parallel()
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.HeaderTimeout = 500 * time.Millisecond
		c.Logger = discardLogger()
	})
	c, err := h2raw.Dial(tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := c.Block(":method", "GET", ":scheme", "http", ":authority", "stall.test", ":path", "/stalled")
	c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:4], EndStream: true})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := c.ReadAll(10 * time.Second)
	took := time.Since(start)
	if h := got.Headers[1]; h2raw.Field(h, ":status") != "408" || h2raw.Field(h, "loomgate-outcome") != "client_timeout" {
		t.Errorf("stream 1 got %v; want 408 with Loomgate-Outcome: client_timeout", h)
	}
	if got.GoAway == nil || !got.Ended {
		t.Errorf("GOAWAY %v, ended %v; want a GOAWAY and the connection closed", got.GoAway, got.Ended)
	}
	if took > 5*time.Second {
		t.Errorf("answered after %v; want HEADER_TIMEOUT (500ms)", took)
	}
	time.Sleep(100 * time.Millisecond) // a second count would be in by now
	if o := tp.rec.wait(t, 1); len(o) != 1 || o[0].Kind != ClientTimeout || o[0].Status != 408 {
		t.Errorf("outcomes %+v; want one client_timeout 408", o)
	}
}

// TestH2COwnAnswersCounted: what Go's HTTP/2 server answers itself, before
// loomgate's handler, carries Loomgate-Outcome and is counted once,
// bad_request with its status: 431 for a header block over the limit, 400
// for a field HTTP/2 forbids. Neither carried the header nor was counted.
// The streams around them on the same connection are answered as ever.
func TestH2COwnAnswersCounted(t *testing.T) {
	t.Parallel()
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	c, err := h2raw.Dial(tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Over MaxHeaderBytes in all, each field within it.
	var large []string
	for i := range 10 {
		large = append(large, fmt.Sprintf("x-large-%d", i), strings.Repeat("a", 1000))
	}
	c.Get(1, "/before")
	c.Get(3, "/large", large...)
	c.Get(5, "/forbidden", "connection", "keep-alive")
	c.Get(7, "/after")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	got := c.ReadAll(2 * time.Second)
	for id, want := range map[uint32][2]string{1: {"200", ""}, 3: {"431", "bad_request"}, 5: {"400", "bad_request"}, 7: {"200", ""}} {
		h := got.Headers[id]
		if h2raw.Field(h, ":status") != want[0] || h2raw.Field(h, "loomgate-outcome") != want[1] {
			t.Errorf("stream %d: %v; want %s with Loomgate-Outcome %q", id, h, want[0], want[1])
		}
	}
	outcomes := tp.rec.wait(t, 4)
	time.Sleep(100 * time.Millisecond)
	if outcomes = tp.rec.wait(t, 4); len(outcomes) != 4 {
		t.Errorf("%d outcomes; want 4, one a stream", len(outcomes))
	}
	kinds := map[string]string{}
	for _, o := range outcomes {
		kinds[string(o.Target)] = fmt.Sprintf("%v %d", o.Kind, o.Status)
	}
	want := map[string]string{"/before": "ok 200", "/large": "bad_request 431", "/forbidden": "bad_request 400", "/after": "ok 200"}
	for target, k := range want {
		if kinds[target] != k {
			t.Errorf("%s counted %q; want %q", target, kinds[target], k)
		}
	}
}

// TestH2CAnswerAwaitingWindowIsReserved: loomgate's own answer to a client
// that grants no window (an initial window of 0) waits for it, its stream
// holding RequestOverheadBytes of the memory bulkhead, for UPSTREAM_TIMEOUT
// at most, after which the stream is reset and the bytes come back; with no
// room left in the bulkhead, the answer goes without its body, which no
// window holds up. Such answers held memory outside the bulkhead, for as
// long as the client liked: 40,000 of them held a 256 MiB sidecar at its
// limit.
func TestH2CAnswerAwaitingWindowIsReserved(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 0, MaxInFlightBytes: 3 * RequestOverheadBytes}, func(c *Config) {
		c.Reserve = RequestBytes
		c.UpstreamTimeout = time.Second
		c.Logger = discardLogger()
	})
	c, err := h2raw.Dial(tp.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Get(1, "/held")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 1 })
	// Two rejected, queue full: each answer's body waits, reserved. The
	// third finds no room for its own: it is answered without a body.
	c.Get(3, "/rejected")
	c.Get(5, "/rejected")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return tp.limiter.Stats().Bytes == 3*RequestOverheadBytes })
	c.Get(7, "/no-room")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	got := c.ReadAll(3 * time.Second)
	for _, id := range []uint32{3, 5} {
		// Whichever comes first at UPSTREAM_TIMEOUT: the stream's reset,
		// or the whole connection's GOAWAY, nothing having moved on it.
		if h := got.Headers[id]; h2raw.Field(h, ":status") != "503" || !got.Resets[id] && !got.Ended {
			t.Errorf("stream %d: %v, reset %v, connection ended %v; want 503, its body never taken and the stream or its connection ended at UPSTREAM_TIMEOUT",
				id, h, got.Resets[id], got.Ended)
		}
	}
	if h := got.Headers[7]; h2raw.Field(h, "loomgate-outcome") != "rejected_memory" || h2raw.Field(h, "content-length") != "0" || got.Resets[7] {
		t.Errorf("stream 7: %v, reset %v; want rejected_memory with no body, and no reset", h, got.Resets[7])
	}
	tp.waitIdle(t)
}

// TestH2CStalledConnectionEnds: a gRPC stream past its headers holds no
// permit and no deadline, but it holds its reservation; when its client
// grants no window, its connection gets a GOAWAY (ENHANCE_YOUR_CALM) once
// nothing has moved on it for UPSTREAM_TIMEOUT, and the bytes come back.
// It held them, and its connection, for as long as the client liked.
func TestH2CStalledConnectionEnds(t *testing.T) {
	t.Parallel()
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		chunk := make([]byte, 16<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.Reserve = RequestBytes
		c.UpstreamTimeout = time.Second
		c.Logger = discardLogger()
	})
	c, err := h2raw.Dial(tp.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Request(1, "POST", "/pkg.Service/Watch", "content-type", "application/grpc", "te", "trailers")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := c.ReadAll(10 * time.Second)
	if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeEnhanceYourCalm || !got.Ended {
		t.Errorf("GOAWAY %v, ended %v; want ENHANCE_YOUR_CALM and the connection closed", got.GoAway, got.Ended)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("ended after %v; want about UPSTREAM_TIMEOUT (1s), twice at most", took)
	}
	tp.waitIdle(t)
}

// TestH2CFrameHeaderStall: a frame's header begun and never finished ends
// its connection with a GOAWAY at HEADER_TIMEOUT, on an idle connection
// and on one with a stream open, whose own body timeout answers it first.
// It held the connection for good while a stream was open, and to the
// idle timeout, 90 s, otherwise.
func TestH2CFrameHeaderStall(t *testing.T) {
	t.Parallel()
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.HeaderTimeout = time.Second
		c.BodyTimeout = 300 * time.Millisecond
		c.Logger = discardLogger()
	})
	for _, streamOpen := range []bool{false, true} {
		c, err := h2raw.Dial(tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		if streamOpen {
			c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
				BlockFragment: c.Block(":method", "POST", ":scheme", "http", ":authority", "stall.test", ":path", "/upload")})
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		// Four of a DATA frame's nine header bytes.
		if _, err := c.Conn.Write([]byte{0, 0, 1, byte(http2.FrameData)}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := c.ReadAll(10 * time.Second)
		took := time.Since(start)
		c.Close()
		if got.GoAway == nil || !got.Ended {
			t.Errorf("stream open %v: GOAWAY %v, ended %v; want a GOAWAY and the connection closed", streamOpen, got.GoAway, got.Ended)
		}
		if took > 5*time.Second {
			t.Errorf("stream open %v: ended after %v; want HEADER_TIMEOUT (1s)", streamOpen, took)
		}
		if h := got.Headers[1]; streamOpen && h2raw.Field(h, ":status") != "408" {
			t.Errorf("stream 1 got %v; want 408 at BODY_TIMEOUT", h)
		}
	}
	tp.waitIdle(t)
}

// TestH2CDrainMidFrame: a drain that begins while a DATA frame is arriving
// lets the frame, and its stream, finish. The drain's wake of the
// connection's reader ended the read halfway through the frame, and with
// it the connection and the stream.
func TestH2CDrainMidFrame(t *testing.T) {
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.Logger = discardLogger()
	})
	c, err := h2raw.Dial(tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
		BlockFragment: c.Block(":method", "POST", ":scheme", "http", ":authority", "drain.test", ":path", "/upload")})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	var frame bytes.Buffer
	http2.NewFramer(&frame, nil).WriteData(1, true, make([]byte, 10000))
	raw := frame.Bytes()
	if _, err := c.Conn.Write(raw[:1009]); err != nil {
		t.Fatal(err)
	}
	for tp.limiter.Stats().InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- tp.proxy.Shutdown(ctx) }()
	time.Sleep(200 * time.Millisecond) // the drain's GOAWAY and wake
	if _, err := c.Conn.Write(raw[1009:]); err != nil {
		t.Fatal(err)
	}
	got := c.ReadAll(5 * time.Second)
	if h := got.Headers[1]; h2raw.Field(h, ":status") != "200" || got.Data[1] != len("10000") {
		t.Errorf("stream 1: headers %v, %d bytes of body; want 200 and the upstream's count, 10000", h, got.Data[1])
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
}
