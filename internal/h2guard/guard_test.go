package h2guard

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/loomgate/loomgate/internal/h2raw"
)

type connKey struct{}

// events records what a guard told.
type events struct {
	mu       sync.Mutex
	answers  []Answer
	timeouts int
	ended    []Reason
}

func (e *events) config(cfg Config) *Config {
	cfg.Answered = func(_ *Conn, a Answer) { e.mu.Lock(); e.answers = append(e.answers, a); e.mu.Unlock() }
	cfg.TimedOut = func(*Conn, time.Time) { e.mu.Lock(); e.timeouts++; e.mu.Unlock() }
	cfg.Ended = func(_ *Conn, r Reason) { e.mu.Lock(); e.ended = append(e.ended, r); e.mu.Unlock() }
	if cfg.MaxHeaderListSize == 0 {
		cfg.MaxHeaderListSize = 8<<10 + 320
	}
	cfg.OutcomeHeader, cfg.OwnOutcome, cfg.TimeoutOutcome = "loomgate-outcome", "bad_request", "client_timeout"
	return &cfg
}

func (e *events) endedWith() []Reason {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Reason(nil), e.ended...)
}

// guardedListener hands the server guarded connections.
type guardedListener struct {
	net.Listener
	cfg *Config
}

func (l guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return New(c, l.cfg), nil
}

// serve runs Go's HTTP/2 server (prior knowledge) on loopback, each
// connection guarded under cfg, and returns its address.
func serve(t *testing.T, cfg *Config, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:        h,
		Protocols:      protos,
		MaxHeaderBytes: 8 << 10,
		ConnContext:    func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ErrorLog:       nil,
	}
	go srv.Serve(guardedListener{ln, cfg})
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func dialH2(t *testing.T, addr string, settings ...http2.Setting) *h2raw.Conn {
	t.Helper()
	c, err := h2raw.Dial(addr, settings...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	flush(t, c)
	return c
}

func flush(t *testing.T, c *h2raw.Conn) {
	t.Helper()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestRapidResetEndsTheConnection: a client that opens streams and resets
// each before its answer (HEADERS then RST_STREAM) gets a GOAWAY with
// ENHANCE_YOUR_CALM once past its budget, and the connection ends.
func TestRapidResetEndsTheConnection(t *testing.T) {
	var ev events
	cfg := ev.config(Config{ResetBurst: 10, ResetRate: 1})
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c := dialH2(t, addr)
	for i := range 20 {
		id := uint32(2*i + 1)
		c.Get(id, "/reset")
		c.Reset(id)
	}
	flush(t, c)
	got := c.ReadAll(5 * time.Second)
	if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeEnhanceYourCalm || !got.Ended {
		t.Fatalf("GOAWAY %v, ended %v; want ENHANCE_YOUR_CALM and the connection ended", got.GoAway, got.Ended)
	}
	if e := ev.endedWith(); len(e) != 1 || e[0] != RapidReset {
		t.Errorf("Ended told %v; want [rapid_reset]", e)
	}
}

// TestResetsOfAnsweredStreamsAreFree: streams reset after their answer
// (a client done reading) cost nothing of the budget.
func TestResetsOfAnsweredStreamsAreFree(t *testing.T) {
	var ev events
	cfg := ev.config(Config{ResetBurst: 5, ResetRate: 0.001})
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := dialH2(t, addr)
	for i := range 30 {
		id := uint32(2*i + 1)
		c.Get(id, "/answered")
		flush(t, c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			f, err := c.Framer.ReadFrame()
			if err != nil {
				t.Fatalf("stream %d: %v before its answer", id, err)
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == id {
				break
			}
		}
		c.Reset(id)
		flush(t, c)
	}
	if got := c.ReadAll(300 * time.Millisecond); got.GoAway != nil || got.Ended {
		t.Errorf("GOAWAY %v, ended %v; want neither: every stream was answered before its reset", got.GoAway, got.Ended)
	}
}

// TestHeaderBlockTimeout: a header block left open (HEADERS without
// END_HEADERS, no CONTINUATION) gets a 408 on its stream, with the
// outcome field, and a GOAWAY at HeaderTimeout, not at the server's idle
// timeout; the client's decoder reads the 408 with its table intact.
func TestHeaderBlockTimeout(t *testing.T) {
	var ev events
	cfg := ev.config(Config{HeaderTimeout: 300 * time.Millisecond})
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) {})
	c := dialH2(t, addr)
	b := c.Block(":method", "GET", ":scheme", "http", ":authority", "guard.test", ":path", "/stalled")
	c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3], EndStream: true})
	flush(t, c)
	start := time.Now()
	got := c.ReadAll(5 * time.Second)
	took := time.Since(start)
	if h := got.Headers[1]; h2raw.Field(h, ":status") != "408" || h2raw.Field(h, "loomgate-outcome") != "client_timeout" {
		t.Errorf("stream 1 got %v; want 408 with loomgate-outcome: client_timeout", h)
	}
	if got.GoAway == nil || !got.Ended {
		t.Errorf("GOAWAY %v, ended %v; want a GOAWAY and the connection ended", got.GoAway, got.Ended)
	}
	if took > 3*time.Second {
		t.Errorf("closed after %v; want about HeaderTimeout (300ms)", took)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.timeouts != 1 {
		t.Errorf("TimedOut told %d times; want once", ev.timeouts)
	}
}

// TestWholeBlocksAreNotTimed: blocks that arrive whole, in one frame or
// split over CONTINUATION frames a little apart, end no connection.
func TestWholeBlocksAreNotTimed(t *testing.T) {
	var ev events
	cfg := ev.config(Config{HeaderTimeout: 300 * time.Millisecond})
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	c := dialH2(t, addr)
	c.Get(1, "/whole")
	b := c.Block(":method", "GET", ":scheme", "http", ":authority", "guard.test", ":path", "/split")
	c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b[:3], EndStream: true})
	flush(t, c)
	time.Sleep(100 * time.Millisecond)
	c.Framer.WriteContinuation(3, true, b[3:])
	flush(t, c)
	time.Sleep(400 * time.Millisecond)
	got := c.ReadAll(300 * time.Millisecond)
	for _, id := range []uint32{1, 3} {
		if s := h2raw.Field(got.Headers[id], ":status"); s != "200" {
			t.Errorf("stream %d: status %q; want 200", id, s)
		}
	}
	if got.GoAway != nil || got.Ended {
		t.Errorf("GOAWAY %v, ended %v; want neither", got.GoAway, got.Ended)
	}
}

// TestOwnAnswersMarked: the server's own answers, 431 to a block over its
// limit and 400 to a field HTTP/2 forbids, go out with the outcome field
// and are told once each; the handler's answers are left as they are, and
// the client's decoder stays in step with the server's encoder throughout.
func TestOwnAnswersMarked(t *testing.T) {
	var ev events
	cfg := ev.config(Config{})
	var handled atomic.Int64
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		w.Header().Set("X-Handler", "yes")
		io.WriteString(w, "ok")
	})
	c := dialH2(t, addr)
	c.Get(1, "/before")
	// Over the limit in all, each field within it: one longer than the
	// whole limit ends the connection (COMPRESSION_ERROR), no answer.
	var large []string
	for i := range 10 {
		large = append(large, fmt.Sprintf("x-large-%d", i), strings.Repeat("a", 1000))
	}
	c.Get(3, "/large", large...)
	c.Get(5, "/between")
	c.Get(7, "/forbidden", "connection", "close")
	c.Get(9, "/after")
	flush(t, c)
	got := c.ReadAll(time.Second)
	want := map[uint32][2]string{1: {"200", ""}, 3: {"431", "bad_request"}, 5: {"200", ""}, 7: {"400", "bad_request"}, 9: {"200", ""}}
	for id, w := range want {
		h := got.Headers[id]
		if h2raw.Field(h, ":status") != w[0] || h2raw.Field(h, "loomgate-outcome") != w[1] {
			t.Errorf("stream %d: %v; want status %s, loomgate-outcome %q", id, h, w[0], w[1])
		}
		if w[0] == "200" && h2raw.Field(h, "x-handler") != "yes" {
			t.Errorf("stream %d: %v; want the handler's own fields, read with the table in step", id, h)
		}
	}
	if n := handled.Load(); n != 3 {
		t.Errorf("the handler ran %d times; want 3", n)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.answers) != 2 || ev.answers[0].Status != 431 || ev.answers[0].Path != "/large" || ev.answers[1].Status != 400 || ev.answers[1].Path != "/forbidden" {
		t.Errorf("Answered told %+v; want 431 for /large, then 400 for /forbidden", ev.answers)
	}
}

// TestStalledConnectionEnds: a client that grants no window (an initial
// window of 0, never updated) leaves a handler's write waiting: the
// connection gets a GOAWAY at StallTimeout.
func TestStalledConnectionEnds(t *testing.T) {
	var ev events
	cfg := ev.config(Config{StallTimeout: 300 * time.Millisecond})
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		g := r.Context().Value(connKey{}).(*Conn)
		g.BeginWrite()
		defer g.EndWrite()
		w.Write(make([]byte, 64<<10))
		w.(http.Flusher).Flush()
	})
	c := dialH2(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.Get(1, "/stalled")
	flush(t, c)
	got := c.ReadAll(5 * time.Second)
	if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeEnhanceYourCalm || !got.Ended {
		t.Fatalf("GOAWAY %v, ended %v; want ENHANCE_YOUR_CALM and the connection ended", got.GoAway, got.Ended)
	}
	if e := ev.endedWith(); len(e) != 1 || e[0] != Stalled {
		t.Errorf("Ended told %v; want [stalled]", e)
	}
}

// TestSlowReaderIsNotStalled: a client that takes its response slowly,
// granting a little window at a time, keeps its connection.
func TestSlowReaderIsNotStalled(t *testing.T) {
	var ev events
	cfg := ev.config(Config{StallTimeout: 300 * time.Millisecond})
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		g := r.Context().Value(connKey{}).(*Conn)
		g.BeginWrite()
		defer g.EndWrite()
		w.Write(make([]byte, 32<<10))
		w.(http.Flusher).Flush()
	})
	c := dialH2(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 4 << 10})
	c.Get(1, "/slow")
	flush(t, c)
	deadline := time.Now().Add(10 * time.Second)
	var body int
	for body < 32<<10 && time.Now().Before(deadline) {
		c.SetReadDeadline(time.Now().Add(time.Second))
		f, err := c.Framer.ReadFrame()
		if err != nil {
			t.Fatalf("after %d bytes: %v", body, err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			body += len(f.Data())
			time.Sleep(150 * time.Millisecond)
			c.Framer.WriteWindowUpdate(0, uint32(len(f.Data())))
			c.Framer.WriteWindowUpdate(1, uint32(len(f.Data())))
			flush(t, c)
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY after %d bytes; want none for a client that reads", body)
		}
	}
	if body < 32<<10 {
		t.Errorf("%d bytes in 10s; want 32 KiB", body)
	}
	if e := ev.endedWith(); len(e) != 0 {
		t.Errorf("Ended told %v; want nothing", e)
	}
}

// TestSettleSeesTheResetSentWithTheStream: a handler that settles before
// it acts sees the reset the client sent in the same write as the stream:
// of 300 streams opened and reset at once, none is taken as alive.
func TestSettleSeesTheResetSentWithTheStream(t *testing.T) {
	var ev events
	cfg := ev.config(Config{})
	var alive, handled atomic.Int64
	addr := serve(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		r.Context().Value(connKey{}).(*Conn).Settle(r.Context(), 5*time.Second)
		if r.Context().Err() == nil {
			alive.Add(1)
		}
	})
	c := dialH2(t, addr)
	for i := range 300 {
		id := uint32(2*i + 1)
		c.Get(id, "/reset")
		c.Reset(id)
		flush(t, c)
	}
	time.Sleep(500 * time.Millisecond)
	if n := alive.Load(); n != 0 {
		t.Errorf("%d of %d handlers found their stream alive after settling; want 0", n, handled.Load())
	}
}

// FuzzFrames: whatever bytes pass, both ways and however cut, the guard
// does not panic, and lets the server's bytes through as they were, in
// order, when it has nothing to mark.
func FuzzFrames(f *testing.F) {
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82, 0x86, 0x84}, EndHeaders: true, PadLength: 3})
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WriteWindowUpdate(0, 10)
	f.Add(buf.Bytes(), uint8(7))
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		cfg := &Config{ResetBurst: 2, ResetRate: 1, MaxHeaderListSize: 100}
		g := New(nopConn{}, cfg)
		var out []byte
		for rest := b; len(rest) > 0; {
			k := min(len(rest), int(cut)+1)
			g.in.inspect(rest[:k])
			out = append(out, g.out.pass(g, rest[:k])...)
			rest = rest[k:]
		}
		out = append(out, g.out.held...)
		if !bytes.Equal(out, b) {
			t.Fatalf("the server's %x went out as %x", b, out)
		}
	})
}

type nopConn struct{ net.Conn }

func (nopConn) SetReadDeadline(time.Time) error  { return nil }
func (nopConn) SetWriteDeadline(time.Time) error { return nil }
func (nopConn) Write(b []byte) (int, error)      { return len(b), nil }
func (nopConn) Close() error                     { return nil }
