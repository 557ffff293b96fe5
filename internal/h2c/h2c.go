// Package h2c serves the proxy's HTTP/2 with prior knowledge (h2c, gRPC's
// way on cleartext), which arrives on the traffic listener like HTTP/1.1:
// the sniffer (internal/sniff) tells it by its preface and the proxy hands
// the connection to a Server here. fasthttp has no HTTP/2, and its
// HTTP/1.1 path is left as it was.
//
// The Server is a relay of frames, not a server of requests: it reads a
// client connection's frames, admits each new stream from its decoded
// header block through the same admission as HTTP/1.1 (queue, bulkhead,
// memory; package internal/admission), and relays the stream's HEADERS,
// DATA and trailers to a stream of its own on a pooled HTTP/2 connection
// to the upstream, and back, honouring both sides' flow control. A stream
// costs its state and the bytes its windows let it hold: no goroutine, no
// request or response object, and what many streams send at once leaves
// in one write (see out). Only a stream that must wait for admission has
// a goroutine, for its wait.
//
// How a stream counts. A plain HTTP/2 request holds its permit until its
// response's last byte is written, as an HTTP/1.1 request does, and
// UpstreamTimeout bounds it. A gRPC call (content-type application/grpc)
// holds its permit until the upstream's response headers, which a gRPC
// server sends with its first message: for a unary call that is its
// answer, for a streaming call the start of the stream. The rest of a
// stream holds no permit, as an upgraded connection after its 101: a
// watch that lasts an hour must not hold a worker for an hour, nor count
// an hour of service time in the histograms and the advice, which see
// admission to the response headers. UpstreamTimeout bounds the wait for
// the headers; the call's own grpc-timeout bounds the whole of it, queue
// included, and goes upstream as what remains of it.
//
// # Concurrency
//
// Who owns what. A client connection's reader goroutine (conn.read) is
// the only one to read its socket, and the only one to open streams or
// to charge the client's budgets (conn.verdict is its own). A
// connection's writer goroutine (out.run) is the only one to write its
// socket; everyone else appends frames to its buffer and kicks it. An
// upstream connection's reader (uconn.serve) reads the upstream's frames
// and hands each to its stream. Streams have no goroutine: their state is
// touched by whichever goroutine has news for them, under their client
// connection's lock.
//
// The locks, and what each guards:
//
//   - conn.mu: the connection's streams and every field of theirs but
//     upWin and up.queued; its windows, blocked list, budgets, stall
//     watch, goingAway. Taken by its reader, by the upstream readers and
//     writers' callbacks with news for one of its streams, by its
//     streams' timers and waits for admission, by a dial starting the
//     streams that waited for it, and by a drain.
//   - pool.mu: the upstream connections, the one being dialled and the
//     streams waiting for it, the limit learned.
//   - uconn.mu: an upstream connection's streams by id, its ids, counts,
//     limit, windows and blocked list, and each stream's upWin and
//     up.queued.
//   - out.mu: a connection's output buffer, its framer and HPACK encoder
//     (whose table is the order of the header blocks appended), the
//     peer's frame size, what is owed.
//   - Server.mu: the set of client connections, alone.
//
// The order is c.mu, then pool.mu, then uconn.mu, then out.mu; no
// goroutine holds two connections' c.mu at once. An upstream reader
// looks its stream up under uconn.mu and lets it go before it takes the
// stream's c.mu. Functions whose comment says a lock is held check it in
// the race detector's builds (held).
//
// Waking the reader. The reader waits in reads of its socket, under a
// read deadline. A goroutine that needs it (a drain's GOAWAY, the last
// stream's end once the connection is going away, the stall watch's end
// of the connection) sets the deadline to now under c.mu, and the reader
// arms its next deadline under c.mu after reading the state it waits
// on, so that no wake is undone by an arm that came after it.
//
// Nothing slow under a lock. Sockets are read and written with no lock
// held. A stream's record goes to admission, and through it to the
// observer (metrics, the advice, the access log), once the locks are let
// go (batch.finish): an upstream connection's reader takes each of its
// clients' locks in turn, and an observer slow under one client's lock
// held up every client of that upstream connection.
package h2c

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/internal/outcome"
)

// MaxStreams is the most streams a client may open at once on one HTTP/2
// connection (SETTINGS_MAX_CONCURRENT_STREAMS): the RFC's advice of no
// fewer than 100 (RFC 9113, 6.5.2) with room. A gRPC client puts every
// call on one connection and holds the calls beyond it in itself, where
// the wait is not measured, so it is not small; it bounds what one
// connection can hold outside the memory bulkhead: a stream waiting for
// admission, or being answered, costs its state besides what it reserves.
// It was 10,000: 40,000 streams whose client granted no window, on 4
// connections, held a 256 MiB sidecar at its limit.
const MaxStreams = 250

// StreamReceiveWindow is what a client may send of a stream's body ahead
// of its forwarding (the stream's flow-control window, RFC 9113's initial
// 64 KiB): a stream waiting in the queue holds that much of its body,
// which its reservation covers (proxy.RequestOverheadBytes, and the
// body's declared length or proxy.UnknownBodyBytes).
const StreamReceiveWindow = 64 << 10

// maxReadFrameSize is the largest frame a client may send
// (SETTINGS_MAX_FRAME_SIZE): RFC 9113's initial value, a quarter of
// StreamReceiveWindow, so that a client may fill a stream's window with
// frames of the size announced.
const maxReadFrameSize = 16 << 10

// A client's budget of streams reset before their answer (premature
// resets, as HAProxy counts them: HEADERS then RST_STREAM is the rapid
// reset of CVE-2023-44487): twice a connection's worth of streams at
// once, so that a client may cancel all it has open and its next calls as
// they open; a tenth of a connection's worth a second; and one back for
// each stream answered, so that a client that cancels what it asked for
// now and then, or hedges its calls, never runs out. Past it the
// connection is ended with a GOAWAY (ENHANCE_YOUR_CALM). A stream reset
// in the batch of frames that opened it is never admitted, nor forwarded,
// whatever the budget (see conn.admitPending).
//
// A stream the relay resets itself for its client's breach of the
// protocol before its answer (a WINDOW_UPDATE of 0 or one that overflows,
// trailers without END_STREAM, DATA past its content-length: the
// MadeYouReset attack, CVE-2025-8671) costs the budget protocolResetCost
// resets: a client that keeps the protocol never makes one, and fifty
// such spend a whole budget, so that no more than the streams a client
// opens in one go before they are reset reach the upstream.
const (
	resetBurst        = 2 * MaxStreams
	resetRate         = MaxStreams / 10
	protocolResetCost = resetBurst / 50
)

// maxSettings is the most entries a client's SETTINGS frame may have, as
// Go's own server allows: RFC 9113 defines six settings.
const maxSettings = 100

// A client's budget of SETTINGS frames: a client sends one as it opens
// the connection and a few more as it tunes its windows (a gRPC client
// one each time its estimate of the bandwidth-delay product grows), not
// more than a hundred at once nor ten a second. Each costs a walk of the
// connection's streams, under its lock, if it changes
// INITIAL_WINDOW_SIZE. Past it the connection is ended with a GOAWAY
// (ENHANCE_YOUR_CALM).
const (
	settingsBurst = 100
	settingsRate  = 10
)

// A client's budget of frames that carry nothing for a stream: PING
// (either way), PRIORITY, a SETTINGS acknowledgement, GOAWAY, an empty
// DATA frame that does not end its stream, RST_STREAM, WINDOW_UPDATE,
// DATA or a stream error on a stream no longer open, a stream refused,
// a frame of an unknown type. Each costs a read, a lock round and some
// an answer, and a flood of them the CPU other clients share: a
// thousand at once, a hundred a second, and one back for each frame
// that carries something (a stream opened, DATA with bytes in it either
// way), so that a client's keepalive and a gRPC client's PING for each
// burst of data it receives never run out. Past it the connection is
// ended with a GOAWAY (ENHANCE_YOUR_CALM).
const (
	idleBurst = 1000
	idleRate  = 100
)

// maxUploadConns is how many upstream connections the pool opens so that
// large uploads (a declared body larger than StreamReceiveWindow) each
// have one: uploads that share a connection share its window, and a
// server may keep that at RFC 9113's initial 64 KiB (nghttpd does), where
// clients straight to it have one each. Past it they share.
const maxUploadConns = 8

// upstreamStreamBuffer is the receive window the relay grants the
// upstream for each stream: the most of a response it holds while the
// client does not take it. A client grants the window it likes, none at
// all if it likes, and the response waits in the proxy: 32 KiB, which
// RequestOverheadBytes, every request's reservation, covers. The price is
// the speed of one large response: a window's worth a round trip.
const upstreamStreamBuffer = 32 << 10

// connWindow is the connection-level window granted either peer: what a
// connection holds is bounded by its streams' windows, and a smaller one
// would let a client that stops reading stall the other clients' streams
// on the same upstream connection.
const connWindow = 1 << 30

// frameHeaderLen is the length of a frame's header.
const frameHeaderLen = 9

// idleTimeout ends a client connection with no stream open.
const idleTimeout = 90 * time.Second

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

// Server relays the HTTP/2 connections of a proxy.
type Server struct {
	cfg  Config
	gate *admission.Gate
	log  *slog.Logger
	pool *pool
	// open counts the streams being served, whether or not they hold a
	// permit (a gRPC stream past its headers holds none): a drain whose
	// time is up with one open cuts it short.
	open atomic.Int64
	// conns counts the client connections being served, among those the
	// proxy counts (Proxy.ClientConns).
	conns   atomic.Int64
	mu      sync.Mutex
	clients map[*conn]struct{}
	// shut is set by Shutdown: connections handed over after it are
	// closed.
	shut bool
	// lastEndLog is when a connection ended for its conduct was last
	// logged (UnixNano).
	lastEndLog atomic.Int64
}

// New returns a Server; Serve hands it connections.
func New(cfg Config) *Server {
	h := &Server{cfg: cfg, gate: cfg.Gate, log: cfg.Logger, clients: make(map[*conn]struct{})}
	addr := cfg.Upstream
	if u, err := url.Parse(cfg.Upstream); err == nil && u.Host != "" {
		addr = u.Host
	}
	h.pool = &pool{s: h, addr: addr}
	return h
}

// Open is the number of streams being served, whether or not they hold a
// permit.
func (h *Server) Open() int64 { return h.open.Load() }

// Conns is the number of client connections being served.
func (h *Server) Conns() int64 { return h.conns.Load() }

// Serve relays a connection that opened with the HTTP/2 preface, and
// returns at once: its end is reported by Config.Closed. It is no
// request: nothing is admitted or reported for it.
func (h *Server) Serve(nc net.Conn) {
	h.conns.Add(1)
	c := newConn(h, nc)
	h.mu.Lock()
	shut := h.shut
	if !shut {
		h.clients[c] = struct{}{}
	}
	h.mu.Unlock()
	if shut {
		nc.Close()
		h.conns.Add(-1)
		h.cfg.Closed()
		return
	}
	go c.serve()
}

// Shutdown ends the HTTP/2 side: a GOAWAY to each connection, whose
// streams in flight finish until ctx ends; each connection closes once
// its last stream has. Close then closes what is left.
func (h *Server) Shutdown(ctx context.Context) error {
	for _, c := range h.shutting() {
		c.goAway()
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for h.conns.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Close closes the connections a shutdown left open, once their streams
// were cut short (see Proxy.cutShort) or answered, and the upstream's.
func (h *Server) Close() {
	for _, c := range h.shutting() {
		c.nc.Close()
	}
	h.pool.closeAll()
}

// shutting takes no more connections, and returns those it has.
func (h *Server) shutting() []*conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shut = true
	cs := make([]*conn, 0, len(h.clients))
	for c := range h.clients {
		cs = append(cs, c)
	}
	return cs
}

// forget drops a closed connection.
func (h *Server) forget(c *conn) {
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
	h.conns.Add(-1)
	h.cfg.Closed()
}

// ended logs a connection ended for its conduct, at most one line every
// ten seconds: an attack ends them by the thousand.
func (h *Server) ended(c *conn, reason string) {
	now := time.Now().UnixNano()
	last := h.lastEndLog.Load()
	if now-last < int64(10*time.Second) || !h.lastEndLog.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("ended an HTTP/2 connection with a GOAWAY (ENHANCE_YOUR_CALM); more may follow unlogged for ten seconds",
		"reason", reason, "remote", c.remote.String())
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
		// The only bad request answered to gRPC is a body over the limit,
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

// ParseGRPCTimeout reads grpc-timeout: at most 8 digits and a unit.
func ParseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
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
