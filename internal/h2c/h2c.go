// Package h2c serves the proxy's HTTP/2 with prior knowledge (h2c, gRPC's
// way on cleartext), which arrives on the traffic listener like HTTP/1.1:
// the sniffer (internal/sniff) tells it by its preface and the proxy hands
// the connection to a Server here, a net/http server that speaks
// unencrypted HTTP/2. fasthttp has no HTTP/2, and its HTTP/1.1 path is
// left as it was.
//
// Each stream is a request: it meets the same admission (queue, bulkhead,
// memory; package internal/admission), ends in one outcome, and goes to
// the upstream over h2c (net/http's Transport, through
// httputil.ReverseProxy: trailers, TE and flushing as HTTP/2 needs them).
//
// How a stream counts. A plain HTTP/2 request holds its permit until its
// response's last byte, as an HTTP/1.1 request does, and UpstreamTimeout
// bounds it. A gRPC call (content-type application/grpc) holds its permit
// until the upstream's response headers, which a gRPC server sends with
// its first message: for a unary call that is its answer, for a streaming
// call the start of the stream. The rest of a stream holds no permit, as
// an upgraded connection after its 101: a watch that lasts an hour must
// not hold a worker for an hour, nor count an hour of service time in the
// histograms and the advice, which see admission to the response headers.
// UpstreamTimeout bounds the wait for the headers; the call's own
// grpc-timeout bounds the whole of it, queue included, and goes upstream
// as what remains of it.
package h2c

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/internal/h2guard"
	"github.com/loomgate/loomgate/internal/outcome"
	"github.com/loomgate/loomgate/internal/rawio"
)

// MaxStreams is the most streams a client may open at once on one HTTP/2
// connection (SETTINGS_MAX_CONCURRENT_STREAMS): Go's default, and the
// RFC's advice of no fewer than 100 (RFC 9113, 6.5.2) with room. A gRPC
// client puts every call on one connection and holds the calls beyond it
// in itself, where the wait is not measured, so it is not small; it bounds
// what one connection can hold outside the memory bulkhead: a stream
// waiting for admission, or being answered, costs Go's server 11 KiB
// (TestClientConnBytes) besides what it reserves, and a reset one its
// handler's goroutine until it notices, which Go's server also bounds by
// this (its fix of CVE-2023-44487). It was 10,000: 40,000 streams whose
// client granted no window, on 4 connections, held a 256 MiB sidecar at
// its limit.
const MaxStreams = 250

// StreamReceiveWindow is what a client may send of a stream's body ahead
// of its handler's reads (the stream's flow-control window, RFC 9113's
// initial 64 KiB): a stream waiting in the queue holds that much of its
// body, which its reservation covers (proxy.RequestOverheadBytes, and the
// body's declared length or proxy.UnknownBodyBytes). Go's default is 1 MiB, four
// reservations' worth held for nobody while the stream waits.
const StreamReceiveWindow = 64 << 10

// maxReadFrameSize is the largest frame a client may send
// (SETTINGS_MAX_FRAME_SIZE): RFC 9113's initial value, a quarter of
// streamReceiveWindow. Go's default, 1 MiB, announced beside a 64 KiB
// stream window, invited a client to send a stream's body in one frame
// larger than the window it may fill (h2spec's case 4.2/1 sends one DATA
// frame of the announced size after its HEADERS), and the server reset
// the stream (FLOW_CONTROL_ERROR). It also bounds the buffer Go's server
// keeps for each connection's frames, as large as the largest frame read:
// a frame of any type made it 1 MiB.
const maxReadFrameSize = 16 << 10

// A client's budget of streams reset before their answer (premature
// resets, as HAProxy counts them: HEADERS then RST_STREAM is the rapid
// reset of CVE-2023-44487): twice a connection's worth of streams at
// once, so that a client may cancel all it has open and its next calls as
// they open; a tenth of a connection's worth a second; and one back for
// each stream answered, so that a client that cancels what it asked for
// now and then, or hedges its calls, never runs out. Past it the
// connection is ended with a GOAWAY (ENHANCE_YOUR_CALM). A reset stream
// that was not admitted is never forwarded, whatever the budget (see
// ServeHTTP).
const (
	resetBurst = 2 * MaxStreams
	resetRate  = MaxStreams / 10
)

// settleMax bounds a stream's wait, before its admission, for the frames
// its client sent with it (see h2guard.Conn.Settle): microseconds, unless
// a frame arrives cut in two.
const settleMax = 50 * time.Millisecond

// What a stream may hold of its response while its client does not take
// it: a client grants the window it likes, none at all if it likes
// (SETTINGS_INITIAL_WINDOW_SIZE 0), and the response waits in the proxy.
// Go's Transport grants the upstream 4 MiB a stream, and took that much of
// each such stream's response: 4.3 MiB of memory a stream, outside the
// memory bulkhead's count and GOMEMLIMIT's reach, gigabytes for a thousand
// streams. With these two a stream so held costs the proxy 69-73 KiB of Go
// memory in all (TestH2CStreamOverheadBytes), which RequestOverheadBytes,
// the reservation of every request, covers with a quarter to spare.
//
// The price is the speed of one large response on loopback, about 125
// MB/s where it was 470 with Go's window: a window's worth a round trip.
// The connection's window is left at Go's 1 GiB: what a connection holds
// is bounded by its streams' windows, and a smaller one would let a client
// that stops reading stall the other clients' streams on the same upstream
// connection.
const (
	// upstreamStreamBuffer is the receive window the Transport grants the
	// upstream for each stream: the most of a response it holds ahead of
	// the copy to the client.
	upstreamStreamBuffer = 32 << 10
	// copyBufferBytes is the copy's buffer, held by a write the client
	// does not take: ReverseProxy's own is 32 KiB, and an HTTP/2 frame
	// carries 16 KiB.
	copyBufferBytes = 16 << 10
)

// copyBuffers is ReverseProxy's pool of copy buffers. It pools the arrays,
// not the slices: putting a slice's address would allocate its header on
// every stream.
type copyBuffers struct{ pool sync.Pool }

func (b *copyBuffers) Get() []byte {
	if p, ok := b.pool.Get().(*[copyBufferBytes]byte); ok {
		return p[:]
	}
	return new([copyBufferBytes]byte)[:]
}

func (b *copyBuffers) Put(buf []byte) {
	if len(buf) == copyBufferBytes {
		b.pool.Put((*[copyBufferBytes]byte)(buf))
	}
}

// Config describes a Server.
type Config struct {
	// Gate admits each stream and finishes its record.
	Gate *admission.Gate
	// Upstream is the service's address, http://host:port.
	Upstream string
	// Dial opens a connection to the upstream.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// UpstreamTimeout, HeaderTimeout and BodyTimeout are the proxy's (see
	// proxy.Config): each bounds a stream as it bounds an HTTP/1.1
	// request.
	UpstreamTimeout, HeaderTimeout, BodyTimeout time.Duration
	// MaxBodyBytes is the largest request body accepted.
	MaxBodyBytes int64
	// MaxHeaderBytes bounds a request's header block.
	MaxHeaderBytes int
	// AnswerBytes is what an answer of the proxy's own reserves while it
	// waits for its client's flow-control window, as a request does.
	AnswerBytes int64
	// ServerTiming adds the Server-Timing header to every response.
	ServerTiming bool
	// Cut reports whether a drain's time is up (see proxy.Proxy.Shutdown).
	Cut func() bool
	// Closed is told of each client connection's close.
	Closed func()
	// Logger receives the process log.
	Logger *slog.Logger
}

// Server serves the HTTP/2 connections of a proxy.
type Server struct {
	cfg  Config
	gate *admission.Gate
	log  *slog.Logger
	srv  *http.Server
	ln   *connQueue
	rp   *httputil.ReverseProxy
	tr   *http.Transport
	once sync.Once
	// open counts the streams being served, whether or not they hold a
	// permit (a gRPC stream past its headers holds none): a drain whose
	// time is up with one open cuts it short.
	open atomic.Int64
	// conns counts the client connections being served, among those the
	// proxy counts (Proxy.ClientConns).
	conns atomic.Int64
	// guard is every connection's watch (see package h2guard).
	guard h2guard.Config
	// lastEndLog is when a connection the guard ended was last logged
	// (UnixNano).
	lastEndLog atomic.Int64
}

// New returns a Server; Serve hands it connections.
func New(cfg Config) *Server {
	h := &Server{cfg: cfg, gate: cfg.Gate, log: cfg.Logger, ln: newConnQueue()}
	target, _ := url.Parse(cfg.Upstream)
	target.Path, target.RawPath = "", ""
	h.tr = &http.Transport{
		DialContext:           cfg.Dial,
		ResponseHeaderTimeout: 0, // bounded by the stream's context
		DisableCompression:    true,
		IdleConnTimeout:       90 * time.Second,
		Protocols:             new(http.Protocols),
		HTTP2:                 &http.HTTP2Config{MaxReceiveBufferPerStream: upstreamStreamBuffer},
	}
	h.tr.Protocols.SetUnencryptedHTTP2(true)
	h.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // forwarded as it came
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			if st := streamOf(pr.Out.Context()); st != nil && !st.req.Deadline.IsZero() {
				pr.Out.Header.Set("Grpc-Timeout", grpcTimeout(time.Until(st.req.Deadline)))
			}
		},
		Transport:      h.tr,
		FlushInterval:  -1,
		BufferPool:     new(copyBuffers),
		ModifyResponse: h.headersArrived,
		ErrorHandler:   h.failed,
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	h.srv = &http.Server{
		Handler:        h,
		Protocols:      protos,
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		IdleTimeout:    90 * time.Second,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:      MaxStreams,
			MaxReceiveBufferPerStream: StreamReceiveWindow,
			MaxReadFrameSize:          maxReadFrameSize,
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	h.guard = h2guard.Config{
		HeaderTimeout: cfg.HeaderTimeout,
		// What a stream's client may take to read its response, as on
		// HTTP/1.1, where it is the connection's write timeout: here
		// the whole connection's, when none of its streams can move.
		StallTimeout: cfg.UpstreamTimeout,
		ResetBurst:   resetBurst,
		ResetRate:    resetRate,
		// net/http's own reckoning of its bound on a header block.
		MaxHeaderListSize: uint32(cfg.MaxHeaderBytes) + 320,
		OutcomeHeader:     strings.ToLower(admission.OutcomeHeader),
		OwnOutcome:        outcome.BadRequest.String(),
		TimeoutOutcome:    outcome.ClientTimeout.String(),
		Answered:          h.ownAnswer,
		TimedOut:          h.headerTimedOut,
		Ended:             h.ended,
	}
	return h
}

// connKey is the context key of a stream's connection, the *h2Conn.
type connKey struct{}

// guardOf is r's connection's guard, nil if it has none.
func guardOf(r *http.Request) *h2guard.Conn {
	if hc, ok := r.Context().Value(connKey{}).(*h2Conn); ok {
		return hc.g
	}
	return nil
}

// ownAnswer counts an answer Go's server gave on its own (a 431 or 400,
// before any handler), which the guard marked with Loomgate-Outcome.
func (h *Server) ownAnswer(c *h2guard.Conn, a h2guard.Answer) {
	now := time.Now()
	h.gate.Observe(&outcome.Record{Kind: outcome.BadRequest, Status: a.Status, Method: []byte(a.Method), Target: []byte(a.Path),
		Remote: c.RemoteAddr(), Total: now.Sub(a.Start), End: now})
}

// headerTimedOut counts a stream whose header block was not whole within
// HeaderTimeout: answered 408, as on HTTP/1.1, and its connection ended.
func (h *Server) headerTimedOut(c *h2guard.Conn, start time.Time) {
	now := time.Now()
	h.gate.Observe(&outcome.Record{Kind: outcome.ClientTimeout, Status: http.StatusRequestTimeout, Remote: c.RemoteAddr(), Total: now.Sub(start), End: now})
}

// ended logs a connection the guard ended, at most one line every ten
// seconds: an attack ends them by the thousand.
func (h *Server) ended(c *h2guard.Conn, r h2guard.Reason) {
	now := time.Now().UnixNano()
	last := h.lastEndLog.Load()
	if now-last < int64(10*time.Second) || !h.lastEndLog.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("ended an HTTP/2 connection with a GOAWAY (ENHANCE_YOUR_CALM); more may follow unlogged for ten seconds",
		"reason", r.String(), "remote", c.RemoteAddr().String())
}

// Open is the number of streams being served, whether or not they hold a
// permit.
func (h *Server) Open() int64 { return h.open.Load() }

// Conns is the number of client connections being served.
func (h *Server) Conns() int64 { return h.conns.Load() }

// Serve hands a connection that opened with the HTTP/2 preface to the
// HTTP/2 server, under its guard, and returns: its end is reported by its
// Close. It is no request: nothing is admitted or reported for it.
func (h *Server) Serve(c net.Conn) {
	h.once.Do(func() { go h.srv.Serve(h.ln) })
	g := h2guard.New(rawio.Wrap(c), &h.guard)
	hc := &h2Conn{Conn: g, g: g, h: h}
	h.conns.Add(1)
	if !h.ln.push(hc) {
		hc.Close()
	}
}

// shutdown ends the HTTP/2 side: a GOAWAY to each connection, and streams
// in flight finish until ctx ends. close then closes what is left.
func (h *Server) Shutdown(ctx context.Context) error {
	h.ln.Close()
	return h.srv.Shutdown(ctx)
}

// close closes the connections a shutdown left open, once their streams
// were cut short (see Proxy.cutShort) or answered.
func (h *Server) Close() {
	h.srv.Close()
	h.tr.CloseIdleConnections()
}

// h2Conn is a connection of the HTTP/2 server's, which gives its place
// back when it closes. Nothing waits for it meanwhile: a goroutine that
// did held a few KiB of stack for each connection, idle ones included.
type h2Conn struct {
	net.Conn
	g    *h2guard.Conn
	h    *Server
	once sync.Once
}

func (c *h2Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.h.conns.Add(-1)
		c.h.cfg.Closed()
	})
	return err
}

// connQueue is a listener whose connections are handed to it.
type connQueue struct {
	ch     chan net.Conn
	mu     sync.Mutex
	closed chan struct{}
	shut   bool
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.closed:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.shut {
		q.shut = true
		close(q.closed)
	}
	return nil
}

func (q *connQueue) Addr() net.Addr { return &net.TCPAddr{} }

// stream is one HTTP/2 request's state, and admission's Client while it
// waits.
type stream struct {
	req  admission.Request
	grpc bool
	// ctx is the stream's: it ends when the client resets the stream or
	// leaves, or the call's own deadline (grpc-timeout) passes.
	ctx context.Context
	r   *http.Request
	// headersAt is when the upstream's response headers arrived, or its
	// failure to send them was known.
	headersAt time.Time
	// g is the stream's connection's guard; nil without one.
	g *h2guard.Conn
	// abort is set when the handler must reset the stream as it ends,
	// having written nothing.
	abort    bool
	timedOut atomic.Bool
	// stalled is set when the client held the stream up: it paused its
	// body past BodyTimeout, or at UpstreamTimeout the stream was still
	// waiting for the rest of its body, or for it to take its response.
	stalled  atomic.Bool
	timer    *time.Timer
	answered bool // the proxy wrote its own answer
	// expired is set when the call's own deadline (grpc-timeout) passed:
	// the client's doing, but its status is DEADLINE_EXCEEDED, which its
	// own timer would also say.
	expired bool
}

// Watch is the wait's context: the stream's own.
func (st *stream) Watch() (context.Context, func()) { return st.ctx, func() {} }

// Left reports whether the stream ended while it waited: a permit handed
// over as it was cancelled (the client left, or its deadline passed) would
// send the upstream a request nobody reads, and count a service time of
// nothing.
func (st *stream) Left(ctx context.Context) bool { return ctx.Err() != nil }

// Header is the stream's header field name.
func (st *stream) Header(name string) []byte {
	if v := st.r.Header.Get(name); v != "" {
		return []byte(v)
	}
	return nil
}

// callExpired says whether the gRPC call's own deadline has passed.
func (st *stream) callExpired() bool {
	return !st.req.Deadline.IsZero() && !time.Now().Before(st.req.Deadline)
}

type streamKey struct{}

func streamOf(ctx context.Context) *stream {
	st, _ := ctx.Value(streamKey{}).(*stream)
	return st
}

func isGRPC(contentType string) bool {
	return strings.HasPrefix(contentType, "application/grpc")
}

// ServeHTTP serves one HTTP/2 stream.
func (h *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.open.Add(1)
	defer h.open.Add(-1)
	cfg := &h.cfg
	st := &stream{grpc: isGRPC(r.Header.Get("Content-Type")), r: r}
	st.req.Begin(time.Now())
	o := &st.req.Record
	o.Method, o.Target = []byte(r.Method), []byte(r.RequestURI)
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		o.Remote = net.TCPAddrFromAddrPort(ap)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if st.grpc {
		if d, ok := ParseGRPCTimeout(r.Header.Get("Grpc-Timeout")); ok {
			st.req.Deadline = st.req.Start.Add(d)
			var c2 context.CancelFunc
			ctx, c2 = context.WithDeadline(ctx, st.req.Deadline)
			defer c2()
		}
	}
	st.ctx = ctx
	defer func() {
		if st.timer != nil {
			st.timer.Stop()
		}
		rec := recover()
		if rec != nil && st.grpc && h.cfg.Cut() && !st.timedOut.Load() && r.Context().Err() == nil {
			// A gRPC stream under way that the drain's end cut (its
			// upstream connection): it ends with trailers that say so,
			// and that a gRPC client takes as "try again, elsewhere",
			// rather than a reset, which it takes as an internal error.
			h.drained(w, st)
			rec = nil
		}
		if rec != nil {
			// ReverseProxy's way to abort a response already under way.
			switch {
			case st.stalled.Load():
				o.Kind = outcome.ClientTimeout
			case st.timedOut.Load(), h.cfg.Cut():
				o.Kind = outcome.UpstreamTimeout
			case r.Context().Err() != nil, st.callExpired():
				// Also a call whose own deadline ended it: the upstream,
				// told of it by grpc-timeout, resets the stream as the
				// client does, whichever comes first.
				o.Kind, o.Status = outcome.ClientClosed, outcome.StatusClientClosed
			default:
				o.Kind = outcome.UpstreamError
			}
		}
		h.finish(st, r)
		if rec == nil && st.abort {
			rec = http.ErrAbortHandler
		}
		if rec != nil {
			panic(rec)
		}
	}()

	g := guardOf(r)
	st.g = g
	if g != nil {
		// A client that opens a stream and resets it in the same breath
		// (the rapid reset) is heard before the stream goes anywhere:
		// the server hands it to its handler before it reads the reset.
		g.Settle(r.Context(), settleMax)
	}
	if r.Context().Err() != nil || g != nil && g.Ending() {
		// Reset before it met admission, or its connection ended, by
		// its client or for it: never forwarded, and kept out of what
		// admission and the advice measure. On a connection the guard
		// is ending, the stream is reset: returning would answer it 200.
		o.Kind, o.Status = outcome.ClientReset, outcome.StatusClientClosed
		st.abort = r.Context().Err() == nil
		return
	}
	if r.ContentLength > cfg.MaxBodyBytes {
		h.answerAs(w, st, outcome.BadRequest)
		return
	}
	var body *idleBody
	if r.Body != nil && r.Body != http.NoBody {
		if !st.grpc {
			// Each pause in the body is bounded as on HTTP/1.1: a client
			// that stops sending would hold its permit, and the upstream's
			// read, until UpstreamTimeout, and be blamed on the upstream.
			// Not a gRPC call's: a client stream may be quiet between
			// messages for as long as the call lives.
			body = &idleBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: cfg.BodyTimeout, stalled: &st.stalled}
			r.Body = body
		}
		// A body of unknown length is cut at the limit: the upstream sees
		// the stream reset, the client a 413.
		r.Body = http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes)
	}
	st.req.Length = int(max(r.ContentLength, -1))
	if !h.gate.Admit(&st.req, st) {
		h.refused(w, st)
		return
	}
	if !st.req.Waited() && r.Context().Err() != nil {
		// Reset as it was admitted, without a wait: the admission is
		// undone, and the stream counted as one reset before it.
		h.gate.Withdraw(&st.req)
		return
	}
	cw := &clientWriter{ResponseWriter: w, g: g}
	// UpstreamTimeout bounds what the permit is held for: the whole
	// exchange, or a gRPC call's wait for its headers. Whoever the stream
	// waits for then is at fault, as on HTTP/1.1, where the deadline is
	// the client connection's for its reads and writes and the upstream
	// call's for the rest: a client still sending its body (a steady
	// upload slower than UpstreamTimeout allows), or one that does not
	// take its response (it grants no flow-control window), is
	// client_timeout, and a write it does not take is cut short with the
	// stream reset, which ends the handler and frees the permit. Without
	// the reset the write would wait as long as the client likes, its
	// permit held, and a fixed pool of one blocked.
	st.timer = time.AfterFunc(cfg.UpstreamTimeout-time.Since(st.req.AdmittedAt), func() {
		if body != nil && body.reading.Load() {
			st.stalled.Store(true)
		}
		cw.cut(&st.stalled)
		st.timedOut.Store(true)
		cancel()
	})
	h.rp.ServeHTTP(cw, r.WithContext(context.WithValue(ctx, streamKey{}, st)))
}

// clientWriter is a stream's ResponseWriter, which knows whether a write
// to the client is under way: one that waits for the client's window.
type clientWriter struct {
	http.ResponseWriter
	// g is told of each write, which may wait for the client's window;
	// nil without a guard.
	g       *h2guard.Conn
	mu      sync.Mutex
	writing int
}

func (w *clientWriter) Write(b []byte) (int, error) {
	w.begin()
	defer w.end()
	return w.ResponseWriter.Write(b)
}

// FlushError is ReverseProxy's flush after each write, which sends what
// the write left buffered: as much a write to the client.
func (w *clientWriter) FlushError() error {
	w.begin()
	defer w.end()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *clientWriter) begin() {
	w.mu.Lock()
	w.writing++
	w.mu.Unlock()
	if w.g != nil {
		w.g.BeginWrite()
	}
}

func (w *clientWriter) end() {
	if w.g != nil {
		w.g.EndWrite()
	}
	w.mu.Lock()
	w.writing--
	w.mu.Unlock()
}

// cut resets the stream if a write is under way, having set stalled: the
// write returns at once with an error. The lock keeps the write, and so
// the handler, from ending meanwhile: a stream's ResponseWriter must not
// be used once its handler has returned.
func (w *clientWriter) cut(stalled *atomic.Bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writing == 0 {
		return
	}
	stalled.Store(true)
	// A deadline in the past resets the stream there and then.
	_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Unix(1, 0))
}

// idleBody is a plain HTTP/2 request's body, each read of which must end
// within idle (BodyTimeout) of its start: the stream's read deadline,
// moved on at every read, as fasthttp's is on HTTP/1.1.
type idleBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	idle    time.Duration
	stalled *atomic.Bool
	// reading is set while a read waits for the client's bytes.
	reading atomic.Bool
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.reading.Store(true)
	defer b.reading.Store(false)
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		// The whole body is in: nothing of the stream is read after it.
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.stalled.Store(true)
	}
	return n, err
}

// headersArrived is the upstream's response headers: the Server-Timing
// header, and for gRPC the permit's end.
func (h *Server) headersArrived(resp *http.Response) error {
	st := streamOf(resp.Request.Context())
	if st == nil {
		return nil
	}
	st.headersAt = time.Now()
	st.req.Record.UpstreamStatus = resp.StatusCode
	st.req.Record.Status = resp.StatusCode
	if st.grpc {
		st.timer.Stop()
		// The rest of a gRPC stream holds no worker, but it holds its
		// buffers (69-73 KiB held by a client that reads nothing), and
		// without its reservation the streams a connection may open could
		// hold memory that the memory bulkhead never saw.
		h.gate.ReleasePermit(&st.req, st.headersAt)
	}
	if h.cfg.ServerTiming {
		resp.Header.Add("Server-Timing", string(st.req.AppendServerTiming(nil, st.headersAt)))
	}
	return nil
}

// failed answers a stream whose upstream did not deliver response headers.
func (h *Server) failed(w http.ResponseWriter, r *http.Request, err error) {
	st := streamOf(r.Context())
	st.headersAt = time.Now()
	// The upstream's part ended here, whatever the answer's writing takes.
	st.req.ServedAt = st.headersAt
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		h.answerAs(w, st, outcome.BadRequest)
	case st.stalled.Load():
		h.answerAs(w, st, outcome.ClientTimeout)
	case st.grpc && h.cfg.Cut() && !st.timedOut.Load():
		// A gRPC call still waiting for its headers when the drain's
		// end cut the upstream's connections (see cutShort): UNAVAILABLE,
		// as a stream under way is told (see drained).
		h.answerAs(w, st, outcome.DrainTimeout)
	case st.timedOut.Load(), h.cfg.Cut():
		// Also a drain whose time is up, which cut the upstream's
		// connections (see cutShort).
		h.answerAs(w, st, outcome.UpstreamTimeout)
	case st.callExpired():
		// The call's own deadline (grpc-timeout), not UpstreamTimeout:
		// the client chose to wait no longer, as one that gives up on
		// HTTP/1.1 does, and its status is DEADLINE_EXCEEDED, which its
		// own timer also says.
		st.expired = true
		h.answer(w, st, outcome.ClientClosed, 0, "deadline exceeded\n")
		st.req.Record.Status = outcome.StatusClientClosed
	case errors.Is(err, context.Canceled):
		st.req.Record.Kind, st.req.Record.Status = outcome.ClientClosed, outcome.StatusClientClosed
	default:
		h.log.Debug("upstream failed", "err", err, "protocol", "h2c")
		st.req.Record.UpstreamErr = err
		h.answerAs(w, st, outcome.UpstreamError)
	}
}

// refused answers a stream admission refused, as its Outcome's kind says.
func (h *Server) refused(w http.ResponseWriter, st *stream) {
	switch kind := st.req.Record.Kind; {
	case st.req.Expired():
		// The call's own deadline passed in the queue. The client's own
		// timer says DEADLINE_EXCEEDED; whichever it hears first, ours
		// must say the same.
		st.expired = true
		h.answer(w, st, outcome.ClientClosed, 0, "deadline exceeded while queued\n")
		st.req.Record.Status = outcome.StatusClientClosed
	case kind == outcome.ClientClosed:
		// Reset by its client, or its connection gone: nobody to answer.
	default:
		h.answerAs(w, st, kind)
	}
}

// gRPC status codes loomgate answers with (google.golang.org/grpc/codes).
const (
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcResourceExhausted = 8
	grpcDeadlineExceeded  = 4
	grpcCancelled         = 1
)

// grpcCode is the gRPC status of an answer of kind k.
func grpcCode(k outcome.Kind) int {
	switch {
	case k.Rejection(), k == outcome.BadRequest:
		// The only bad request answered here is a body over the limit,
		// which gRPC's own servers call RESOURCE_EXHAUSTED too.
		return grpcResourceExhausted
	case k == outcome.UpstreamTimeout:
		return grpcDeadlineExceeded
	case k == outcome.UpstreamError, k == outcome.DrainTimeout:
		return grpcUnavailable
	case k == outcome.ClientClosed:
		return grpcCancelled
	}
	return grpcInternal
}

// answerAs writes the proxy's own answer to kind, as every protocol gives
// it (see admission.Gate.Answer).
func (h *Server) answerAs(w http.ResponseWriter, st *stream, kind outcome.Kind) {
	status, msg, _ := h.gate.Answer(kind)
	h.answer(w, st, kind, status, msg)
}

// answer writes the proxy's own answer: for gRPC a trailers-only response
// with grpc-status (a gRPC client ignores the HTTP status), otherwise the
// plain-text answer HTTP/1.1 gets. Both carry Loomgate-Outcome, and a
// rejection Retry-After.
//
// A plain answer's body waits for the client's flow-control window, which
// a client may never grant: while it waits, the stream reserves
// RequestOverheadBytes (its state, and what it may hold of its body), as
// a request does, and UpstreamTimeout bounds the wait, as it bounds a
// response's; without room in the memory bulkhead it goes without its
// body. A gRPC answer is headers alone, which no window holds up.
func (h *Server) answer(w http.ResponseWriter, st *stream, kind outcome.Kind, status int, msg string) {
	o := &st.req.Record
	o.Kind = kind
	st.answered = true
	hdr := w.Header()
	for k := range hdr {
		delete(hdr, k) // nothing of the upstream's
	}
	hdr.Set(admission.OutcomeHeader, kind.String())
	if kind.Rejection() {
		var retryAfter int64
		status, _, retryAfter = h.gate.Answer(kind)
		hdr.Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	}
	if h.cfg.ServerTiming {
		hdr.Set("Server-Timing", string(st.req.AppendServerTiming(nil, time.Now())))
	}
	if st.grpc {
		hdr.Set("Content-Type", "application/grpc")
		code := grpcCode(kind)
		if st.expired {
			code = grpcDeadlineExceeded
		}
		hdr.Set("Grpc-Status", strconv.Itoa(code))
		hdr.Set("Grpc-Message", strings.TrimSuffix(msg, "\n"))
		o.Status = http.StatusOK
		w.WriteHeader(http.StatusOK)
		return
	}
	hdr.Set("Content-Type", admission.TextPlain)
	o.Status = status
	if !h.gate.ReserveAnswer(&st.req, h.cfg.AnswerBytes) {
		hdr.Set("Content-Length", "0")
		w.WriteHeader(status)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.UpstreamTimeout))
	// Flushed here, not by the server after the handler: the wait for
	// the window is the handler's, under its deadline and the guard's
	// watch, while the stream holds its reservation.
	if cw, ok := w.(*clientWriter); ok {
		cw.begin()
		defer cw.end()
	} else if st.g != nil {
		st.g.BeginWrite()
		defer st.g.EndWrite()
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
	_ = rc.Flush()
}

// drained ends a gRPC stream under way that the drain's end cut: its
// trailers carry UNAVAILABLE and Loomgate-Outcome, after whatever of the
// upstream's messages went out. A gRPC client takes them as the server
// going away; a message cut in two, it takes as the stream's end with
// that status all the same.
func (h *Server) drained(w http.ResponseWriter, st *stream) {
	o := &st.req.Record
	o.Kind = outcome.DrainTimeout
	hdr := w.Header()
	hdr.Set(http.TrailerPrefix+"Grpc-Status", strconv.Itoa(grpcUnavailable))
	_, msg, _ := h.gate.Answer(outcome.DrainTimeout)
	hdr.Set(http.TrailerPrefix+"Grpc-Message", strings.TrimSuffix(msg, "\n"))
	hdr.Set(http.TrailerPrefix+admission.OutcomeHeader, outcome.DrainTimeout.String())
}

// finish ends a stream: a client that left before the upstream's headers
// came is the stream's end, whatever else went wrong after.
func (h *Server) finish(st *stream, r *http.Request) {
	o := &st.req.Record
	if o.Kind == outcome.OK && r.Context().Err() != nil && st.headersAt.IsZero() {
		o.Kind, o.Status = outcome.ClientClosed, outcome.StatusClientClosed
	}
	h.gate.Finish(&st.req, time.Now())
}

// ParseGRPCTimeout reads grpc-timeout: at most 8 digits and a unit.
func ParseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	unit := map[byte]time.Duration{
		'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond,
	}[v[len(v)-1]]
	if unit == 0 {
		return 0, false
	}
	if n > int64(1<<63-1)/int64(unit) {
		return 1<<63 - 1, true
	}
	return time.Duration(n) * unit, true
}

// grpcTimeout writes d as grpc-timeout, in the finest unit that fits in
// 8 digits.
func grpcTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		d time.Duration
		c string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if v := (d + u.d - 1) / u.d; v < 1e8 {
			return strconv.FormatInt(int64(v), 10) + u.c
		}
	}
	return strconv.FormatInt(int64(min(d/time.Hour, 1e8-1)), 10) + "H"
}
