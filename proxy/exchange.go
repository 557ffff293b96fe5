package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/header"
	"github.com/loomgate/loomgate/internal/peer"
	"github.com/loomgate/loomgate/limiter"
)

// What the proxy says in its own responses: short, plain and free of
// internal error text, which could leak addresses or versions.
const (
	textPlain          = "text/plain; charset=utf-8"
	msgBodyTooLarge    = "request body too large\n"
	msgHeadersTooLarge = "request headers too large\n"
	msgMalformed       = "malformed request\n"
	msgBareLF          = "malformed request: end lines with CRLF\n"
	msgVersion         = "HTTP version not supported: send HTTP/1.1\n"
	msgCoding          = "transfer coding not supported: send chunked or Content-Length\n"
	msgConnect         = "CONNECT is not supported: this is a reverse proxy, not a tunnel\n"
	msgReadTimeout     = "request timeout: the request was not sent in time\n"
	msgQueueFull       = "overloaded: queue full\n"
	msgQueueTimeout    = "overloaded: queue wait timed out\n"
	msgBulkheadFull    = "overloaded: bulkhead full\n"
	msgMemoryFull      = "overloaded: in-flight memory limit reached\n"
	msgClientClosed    = "client closed request\n"
	msgUpstreamError   = "bad gateway: upstream unavailable\n"
	msgUpstreamTimeout = "gateway timeout: upstream too slow\n"
	msgDrained         = "shutting down: the drain's time is up\n"
	msgInternal        = "internal error\n"
	msgNoFiles         = "service unavailable: the proxy is out of file descriptors\n"
)

// clientCheckAfter is the age from which a request's client is checked
// before its response is written.
const clientCheckAfter = 10 * time.Millisecond

var (
	// errBodyTooLarge ends a chunked upload that passes MaxBodyBytes.
	errBodyTooLarge = errors.New("proxy: request body too large")
	// errClientBody marks a failure to read the client's body, so that it
	// is not blamed on the upstream.
	errClientBody = errors.New("proxy: reading request body")
)

// exchange is the proxy's state for one request, pooled. From forward or
// respond on, fasthttp owns it as the response body stream: its Read feeds
// the response and its CloseWithError ends the request.
type exchange struct {
	p *Proxy

	start, admittedAt, servedAt time.Time
	rejectedAt                  time.Time
	asked, admitted             bool
	bytes                       int64
	outcome                     Outcome
	// ticket is the request's place in a dry run's shadow, nil without.
	ticket *limiter.Ticket
	// fields are the request's fields prepareRequest rewrites, noted when
	// admission checked its header block.
	fields header.Fields
	// upgrading is set for an Upgrade request (WebSocket), read once by
	// admission and again when the admitted request is passed on.
	upgrading bool
	// upgradePlace is set while the request holds an upgraded
	// connection's place (see upgrades.reserve), from its admission until
	// a tunnel takes it or the request ends (see releaseUpgradePlace).
	upgradePlace bool
	// handedOff is set once fasthttp owns the exchange.
	handedOff bool
	// continuedCtx is the request's while handleExpect's admission waits
	// for handle to take it up.
	continuedCtx *fasthttp.RequestCtx
	// ended is the client's connection when the client had sent its FIN
	// by the time the response was ready: closed or half-closed.
	ended net.Conn
	// unsent is set when the upstream answered before the request's body
	// was all sent: the rest is still on the client's connection.
	unsent bool

	resp    fasthttp.Response // the upstream's
	up      upstreamConn      // the connection resp arrives on
	reqBody requestBody
	body    io.Reader // what Read serves: &buffered or the upstream's stream
	// streaming is set when body is the upstream's stream, so that its
	// end marks the upstream's last byte and its failure is the upstream's.
	streaming bool
	readErr   error
	buffered  bytes.Reader

	// Scratch space reused across requests.
	buf, target, method, scratch []byte
	names                        [][]byte
}

func (e *exchange) begin(ctx *fasthttp.RequestCtx) {
	// fasthttp read the clock once the request was read, which is where a
	// request's time starts: a clock read saved on every request.
	e.start = ctx.Time()
	if e.start.IsZero() {
		e.start = time.Now() // fasthttp's LazyRequestTime, or a test's ctx
	}
	e.method = append(e.method[:0], ctx.Method()...)
	e.target = append(e.target[:0], ctx.Request.Header.RequestURI()...)
	e.outcome = Outcome{Kind: OK, Remote: ctx.RemoteAddr()}
}

// forward sends the request upstream and arranges for the response.
func (e *exchange) forward(ctx *fasthttp.RequestCtx) {
	p := e.p
	req := &ctx.Request
	e.prepareRequest(ctx)

	resp := &e.resp
	// The client's response header is a copy of this one, flags and all:
	// it takes the server's NoDefaultContentType and NoDefaultDate from
	// the client's (which the server set), or fasthttp would invent a
	// Content-Type and a Date (replacing the service's own) the service
	// never sent. There is no setter for the Date flag but this copy.
	ctx.Response.Header.CopyTo(&resp.Header)
	if err := e.roundTrip(req, e.admittedAt.Add(p.timeout)); err != nil {
		e.upstreamFailed(ctx, err)
		return
	}
	e.outcome.UpstreamStatus = resp.StatusCode()

	length := resp.Header.ContentLength()
	switch {
	case !e.hasBody():
		e.servedAt = time.Now()
		e.up.reusable = true
		e.releaseUpstream()
		e.buffered.Reset(nil)
		e.body = &e.buffered
	case length >= 0 && length <= ResponseBufferBytes && e.reserveResponse(length):
		if err := e.readBody(); err != nil {
			e.upstreamFailed(ctx, err)
			return
		}
		e.servedAt = time.Now()
		e.buffered.Reset(resp.Body())
		e.body = &e.buffered
	default:
		// Too large, of unknown length, or refused by the memory bulkhead:
		// streaming holds only the copy buffer, which RequestOverheadBytes
		// already counts.
		e.body = e.streamBody()
		e.streaming = true
		if length < 0 {
			length = -1 // chunked to the client, whatever the upstream did
		}
	}

	out := &ctx.Response.Header
	resp.Header.CopyTo(out)
	if responseFields(out)&header.HopFields != 0 {
		e.names = removeHopHeaders(out, e.names)
	}
	// The upstream closing its connection says nothing about the client's.
	out.ResetConnectionClose()
	if e.unsent {
		// The rest of the body is still coming, and the connection
		// closes after the answer; lingering, lest the reset of a close
		// with bytes arriving overtake the answer (see respond).
		out.SetConnectionClose()
		lingerOnClose(ctx.Conn())
	}
	e.addServerTiming(ctx)
	// A client that gave up is worth knowing about (the work was wasted),
	// but fasthttp's write to a closed socket often succeeds into the
	// kernel's buffer, so ask the socket. Clients do not give up within
	// milliseconds, and the check costs a syscall, so quick requests skip
	// it.
	if e.age() >= clientCheckAfter {
		switch peer.Peek(ctx.Conn()) {
		case peer.Reset:
			e.outcome.Kind = ClientClosed
		case peer.Ended:
			// Closed, or half-closed and still reading: only sending tells
			// them apart. The header goes out at once, and a client that
			// closed answers it with a reset, looked for once the response
			// is done (see CloseWithError).
			ctx.Response.ImmediateHeaderFlush = true
			e.ended = ctx.Conn()
		}
	}
	e.handOff(ctx, length, resp.StatusCode())
}

// age is how long ago the request was read, by the last clock reading
// taken for it: a streamed response's has none since admission, and reads
// the clock.
func (e *exchange) age() time.Duration {
	if e.servedAt.IsZero() {
		return time.Since(e.start)
	}
	return e.servedAt.Sub(e.start)
}

// reserveResponse charges a response body about to be buffered to the
// request's reservation, and reports false when the memory bulkhead cannot
// take it. Admission could not charge it: the size is known only now.
func (e *exchange) reserveResponse(length int) bool {
	r := e.p.reserver
	if r == nil {
		return true
	}
	if !r.TryReserve(int64(length)) {
		return false
	}
	// From here Release returns these bytes with the rest.
	e.bytes += int64(length)
	return true
}

// prepareRequest turns the client's request into the upstream's, in place.
func (e *exchange) prepareRequest(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	// The client's "Connection: close" is about its own connection; left
	// in, it would make fasthttp close a pooled upstream connection.
	h.ResetConnectionClose()
	if e.fields&header.HopFields != 0 {
		e.names = removeHopHeaders(h, e.names)
	}
	if e.fields&header.Expect != 0 {
		// fasthttp already answered "100 Continue"; the upstream must not
		// be asked to answer it again.
		h.DelBytes(headerExpect)
	}
	// No Content-Type of fasthttp's for a body sent without one, and Host
	// as the client sent it: fasthttp's Write would otherwise take Host
	// from the parsed URI, lower-cased.
	h.SetNoDefaultContentType(true)
	ctx.Request.UseHostHeader = true
	if t := h.RequestURI(); len(t) > 0 && t[0] != '/' {
		if authority, ok := header.AbsoluteAuthority(t); ok {
			// Absolute form: the target's authority is the host (RFC 9112,
			// 3.2.2), and the target goes on in origin form, as fasthttp
			// writes it from the parsed URI.
			h.SetHostBytes(authority)
		}
	}
	e.scratch = setForwarded(h, ctx.RemoteAddr(), e.scratch)
	if len(h.Host()) == 0 {
		h.SetHost(e.p.host)
	}
	switch declared := h.ContentLength(); {
	case declared >= 0 && declared <= RequestPrefetchBytes:
		// fasthttp has read this body whole before the handler, yet hands
		// it on as a stream over what it read. Its bytes stay the
		// request's: a request held whole can go out again on another
		// connection if a pooled one turns out closed, and is written in
		// one call with the wait for its answer.
		ctx.Request.CloseBodyStream()
	case declared > RequestPrefetchBytes || declared == -1:
		// The rest of this body is still on the client's connection. Wrap it
		// to enforce the limit on chunked bodies and to tell a client that
		// stops sending from an upstream that stops reading.
		e.reqBody = requestBody{
			r: ctx.Request.BodyStream(), max: e.p.maxBody, declared: int64(declared),
			conn: ctx.Conn(), idle: e.p.bodyIdle, end: e.admittedAt.Add(e.p.timeout),
		}
		ctx.Request.SetBodyStream(&e.reqBody, declared)
	}
}

// rejected answers a request the Admitter did not admit.
func (e *exchange) rejected(ctx *fasthttp.RequestCtx, err error) {
	e.rejectedAt = time.Now()
	switch {
	case errors.Is(err, limiter.ErrQueueFull):
		e.respond(ctx, fasthttp.StatusServiceUnavailable, RejectedQueueFull, msgQueueFull)
	case errors.Is(err, limiter.ErrQueueTimeout):
		e.respond(ctx, fasthttp.StatusServiceUnavailable, RejectedQueueTimeout, msgQueueTimeout)
	case errors.Is(err, limiter.ErrBulkheadFull):
		e.respond(ctx, fasthttp.StatusServiceUnavailable, RejectedBulkhead, msgBulkheadFull)
	case errors.Is(err, limiter.ErrTooLarge) && ctx.Request.Header.ContentLength() > 0:
		// The declared body alone is more than the whole memory bulkhead:
		// no wait and no retry would admit it, so it is a body too large
		// (413, with no Retry-After), not back pressure. The rest of the
		// body is still coming, and is not read.
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusRequestEntityTooLarge, BadRequest, msgBodyTooLarge)
	case errors.Is(err, limiter.ErrMemoryFull):
		e.respond(ctx, fasthttp.StatusServiceUnavailable, RejectedMemory, msgMemoryFull)
	case errors.Is(err, context.Canceled):
		// Nobody is left to read an answer; close rather than write one.
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusServiceUnavailable, ClientClosed, msgClientClosed)
	default:
		e.p.log.Error("admitter failed", "err", err)
		e.respond(ctx, fasthttp.StatusInternalServerError, InternalError, msgInternal)
	}
}

// upstreamFailed answers an admitted request whose upstream did not deliver
// a response. Nothing has been sent to the client yet.
func (e *exchange) upstreamFailed(ctx *fasthttp.RequestCtx, err error) {
	e.servedAt = time.Now()
	// Whatever is left on the connection is out of step: it is closed.
	e.up.reusable = false
	e.releaseUpstream()
	switch {
	case errors.Is(err, errBodyTooLarge):
		// The upstream saw part of a body and then a broken stream; that
		// connection is gone, the client gets the real reason.
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusRequestEntityTooLarge, BadRequest, msgBodyTooLarge)
	case e.reqBody.cause != nil:
		// The client's fault, whichever way: its connection is out of step
		// and is closed. The cause is judged on its own, as the client's
		// connection reported it: on its way fasthttp's copy to the
		// upstream wraps it in an error of the upstream's connection.
		ctx.SetConnectionClose()
		switch cause := e.reqBody.cause; {
		case isTimeout(cause):
			e.respond(ctx, fasthttp.StatusRequestTimeout, ClientTimeout, msgReadTimeout)
		case clientGone(cause):
			e.respond(ctx, fasthttp.StatusBadRequest, ClientClosed, msgClientClosed)
		default:
			e.respond(ctx, fasthttp.StatusBadRequest, BadRequest, msgMalformed)
		}
	case isTimeout(err):
		e.outcome.UpstreamErr = err
		e.respond(ctx, fasthttp.StatusGatewayTimeout, UpstreamTimeout, msgUpstreamTimeout)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		// The dial failed for want of a descriptor of the proxy's own
		// (unbounded client connections took them all): the upstream is
		// not at fault, and a retry elsewhere may do better.
		e.p.log.Debug("no file descriptor to dial the upstream", "err", err)
		e.respond(ctx, fasthttp.StatusServiceUnavailable, InternalError, msgNoFiles)
	default:
		e.p.log.Debug("upstream failed", "err", err)
		e.outcome.UpstreamErr = err
		e.respond(ctx, fasthttp.StatusBadGateway, UpstreamError, msgUpstreamError)
	}
}

// clientGone reports whether err says the connection ended, rather than
// that what arrived on it was malformed.
func clientGone(err error) bool {
	var netErr net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &netErr)
}

// isTimeout reports whether err is fasthttp's or the network's timeout. It
// is a function of its own so that the error variable errors.As needs
// escapes only on this rare path, not in every caller's frame.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &netErr) && netErr.Timeout()
}

// setOutcomeHeader marks an answer the proxy makes itself, naming why, so
// that a client and its retry policy can tell a loomgate 503 from the
// upstream's own.
func setOutcomeHeader(h *fasthttp.ResponseHeader, kind Kind) {
	h.SetCanonical(headerOutcome, kindValues[kind])
}

// respond answers with the proxy's own short plain-text response. A
// rejection's status is RejectStatus, whatever status says.
func (e *exchange) respond(ctx *fasthttp.RequestCtx, status int, kind Kind, msg string) {
	e.releaseUpstream()
	e.outcome.Kind = kind
	out := &ctx.Response
	out.Header.SetContentType(textPlain)
	setOutcomeHeader(&out.Header, kind)
	if kind.Rejection() {
		status = e.p.rejectStatus
		e.scratch = strconv.AppendInt(e.scratch[:0], e.retryAfterSeconds(kind), 10)
		out.Header.SetCanonical(headerRetryAfter, e.scratch)
	}
	if cl := ctx.Request.Header.ContentLength(); !e.admitted && (kind.Rejection() || status == fasthttp.StatusRequestEntityTooLarge) &&
		(ctx.Response.ConnectionClose() || cl == -1 || cl > unreadBodyKept) {
		// A body declared, never read, and too large to throw away to
		// keep the connection: closed at once with the body still
		// arriving, the connection would be reset, and a reset can
		// overtake the answer (a 2 MB upload rejected saw "connection
		// reset" half the time, not the 503 and its Retry-After). The
		// close after the answer lingers instead (off Linux, where the
		// connection is net's own, it does not).
		ctx.SetConnectionClose()
		lingerOnClose(ctx.Conn())
	}
	e.addServerTiming(ctx)
	e.buf = append(e.buf[:0], msg...)
	e.buffered.Reset(e.buf)
	e.body = &e.buffered
	e.handOff(ctx, len(e.buf), status)
}

// lingerOnClose makes the close of conn, a client's, linger: it
// half-closes, reads and throws away what still comes for a while, then
// closes (off Linux, where the connection is net's own, it does not).
func lingerOnClose(conn net.Conn) {
	if l, ok := conn.(interface{ LingerOnClose() }); ok {
		l.LingerOnClose()
	}
}

// unreadBodyKept is the most of a request body left unread that fasthttp
// reads and throws away after the answer to keep the connection; with
// more left, it closes the connection.
const unreadBodyKept = 256 << 10

func (e *exchange) retryAfterSeconds(kind Kind) int64 {
	if e.p.retryAfter == nil {
		return 1
	}
	d := e.p.retryAfter(kind)
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// addServerTiming writes "queue;dur=<ms>, upstream;dur=<ms>" (W3C Server
// Timing). For a streamed body the upstream's time is measured to its
// headers, the last moment before the header must be sent; the Outcome has
// the time to its last byte.
func (e *exchange) addServerTiming(ctx *fasthttp.RequestCtx) {
	if !e.p.timing {
		return
	}
	var queue, upstream time.Duration
	if e.asked && !e.admitted {
		queue = e.rejectedAt.Sub(e.start)
	}
	if e.admitted {
		queue = e.admittedAt.Sub(e.start)
		end := e.servedAt
		if end.IsZero() {
			end = time.Now() // a streamed body: to its headers
		}
		upstream = end.Sub(e.admittedAt)
	}
	b := append(e.scratch[:0], "queue;dur="...)
	b = appendMillis(b, queue)
	b = append(b, ", upstream;dur="...)
	b = appendMillis(b, upstream)
	e.scratch = b
	// Added, not set: the upstream's own Server-Timing entries stay.
	ctx.Response.Header.AddBytesKV(headerServerTiming, b)
}

// appendMillis writes d in milliseconds with three decimals, as
// strconv.AppendFloat(b, ms, 'f', 3, 64) would (half a microsecond rounds
// up), in integers: float formatting took more of a request's time than
// the rest of the header's writing.
func appendMillis(b []byte, d time.Duration) []byte {
	if d < 0 {
		b = append(b, '-')
		d = -d
	}
	us := (d + time.Microsecond/2) / time.Microsecond
	b = strconv.AppendInt(b, int64(us/1000), 10)
	frac := us % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// handOff gives the exchange to fasthttp as the response body. It must be
// the handler's last act: from here fasthttp may close the exchange, and
// closing returns it to the pool.
func (e *exchange) handOff(ctx *fasthttp.RequestCtx, length, status int) {
	ctx.Response.SetStatusCode(status)
	e.outcome.Status = status
	e.handedOff = true
	ctx.Response.SetBodyStream(e, length)
}

// Read serves the response body.
func (e *exchange) Read(b []byte) (int, error) {
	n, err := e.body.Read(b)
	if e.streaming && err != nil {
		if err == io.EOF {
			e.servedAt = time.Now()
			e.up.reusable = true
		} else {
			e.readErr = err
		}
	}
	return n, err
}

// CloseWithError is called by fasthttp once, after the response was written
// (writeErr nil) or failed to write, or when fasthttp discards it.
func (e *exchange) CloseWithError(writeErr error) error {
	now := time.Now()
	if e.streaming {
		e.releaseUpstream()
		if e.servedAt.IsZero() {
			e.servedAt = now
		}
	}
	o := &e.outcome
	switch {
	case e.readErr != nil && isTimeout(e.readErr):
		o.Kind, o.UpstreamErr = UpstreamTimeout, e.readErr
	case e.readErr != nil:
		o.Kind, o.UpstreamErr = UpstreamError, e.readErr
	case writeErr != nil && o.Kind == OK && isTimeout(writeErr):
		// Cut by the write timeout: the client stalled reading its
		// response; it did not leave.
		o.Kind = ClientTimeout
	case writeErr != nil && o.Kind == OK:
		o.Kind = ClientClosed
	case e.ended != nil && o.Kind == OK && peer.Peek(e.ended) == peer.Reset:
		// It had closed: the response's header came back as a reset.
		o.Kind = ClientClosed
	}
	if o.Kind == ClientClosed {
		o.Status = StatusClientClosed
	}
	e.finish(now)
	return nil
}

// finish completes the Outcome, releases what the request held, reports it
// and returns the exchange to its pool.
func (e *exchange) finish(now time.Time) {
	// A request that ends before its tunnel opens gives back the place it
	// reserved, on whatever path it ended: its client left after a 100
	// Continue, a panic, an answer of the proxy's own. Held on, each
	// would shrink MaxUpgraded and MaxClientConns for good.
	e.releaseUpgradePlace()
	o := &e.outcome
	o.Total = now.Sub(e.start)
	o.End = now
	o.Bytes = e.bytes
	o.Admission, o.Admitted = e.asked, e.admitted
	if e.admitted {
		o.Queue = e.admittedAt.Sub(e.start)
		o.Service = e.servedAt.Sub(e.admittedAt)
		if e.p.clocked != nil {
			e.p.clocked.ReleaseAt(now, e.bytes)
		} else {
			e.p.admit.Release(e.bytes)
		}
	} else if e.asked {
		// Rejected: the whole wait was queueing, up to the rejection.
		o.Queue = e.rejectedAt.Sub(e.start)
	}
	o.Method, o.Target = e.method, e.target
	if e.ticket != nil {
		e.ticket.Leave(o.Service)
		e.ticket = nil
	}
	e.p.observe(o)

	// Only a bug leaves a connection here (a panic between the round trip
	// and the hand-off); it is out of step, and closed.
	e.up.reusable = false
	e.releaseUpstream()
	e.resp.Reset()
	e.reqBody = requestBody{}
	e.body, e.readErr = nil, nil
	e.buffered.Reset(nil)
	e.outcome = Outcome{}
	e.start, e.admittedAt, e.servedAt = time.Time{}, time.Time{}, time.Time{}
	e.asked, e.admitted, e.streaming, e.handedOff, e.bytes = false, false, false, false, 0
	e.upgrading, e.upgradePlace, e.fields, e.unsent = false, false, 0, false
	e.ended, e.continuedCtx = nil, nil
	e.rejectedAt = time.Time{}
	// Keep scratch buffers, but not a large body's: a pool full of 64 KiB
	// buffers would be memory held for nothing.
	if cap(e.buf) > 16<<10 {
		e.buf = nil
	}
	e.p.exchanges.Put(e)
}

// abandon ends an admitted request that never reached the upstream because
// its body did not arrive, counting it as kind with status.
func (e *exchange) abandon(kind Kind, status int) {
	now := time.Now()
	e.servedAt = now
	e.outcome.Kind, e.outcome.Status = kind, status
	e.finish(now)
}

// recoverExpect is recoverPanic for handleExpect, which must return the
// status of the answer.
func (e *exchange) recoverExpect(ctx *fasthttp.RequestCtx, status *int) {
	r := recover()
	if r == nil {
		return
	}
	e.answerPanic(ctx, r)
	*status = ctx.Response.StatusCode()
}

// recoverPanic turns a panic in the handler into a 500 and an Outcome, so
// a bug costs one request rather than the process.
func (e *exchange) recoverPanic(ctx *fasthttp.RequestCtx) {
	r := recover()
	if r == nil {
		return
	}
	e.answerPanic(ctx, r)
}

// answerPanic answers a request whose handling panicked with r.
func (e *exchange) answerPanic(ctx *fasthttp.RequestCtx, r any) {
	e.p.log.Error("panic serving request", "panic", r, "stack", string(debug.Stack()))
	if e.handedOff {
		return // the response and its completion are already arranged
	}
	if e.admitted && e.servedAt.IsZero() {
		e.servedAt = time.Now()
	}
	ctx.Response.Reset()
	e.respond(ctx, fasthttp.StatusInternalServerError, InternalError, msgInternal)
}

// requestBody is the part of a request body still on the client's
// connection, on its way to the upstream.
type requestBody struct {
	r      io.Reader
	n, max int64
	// declared is the Content-Length, -1 for a chunked body.
	declared int64
	err      error // sticky
	cause    error // the client connection's own error, when reading it failed
	// Each read must come within idle of the previous one and before end
	// (admission + UpstreamTimeout): a stalled upload holds a permit.
	conn net.Conn
	idle time.Duration
	end  time.Time
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// fasthttp reads the stream from the connection's buffered reader, so
	// the connection's deadline bounds the wait for the client's bytes.
	deadline := time.Now().Add(b.idle)
	if b.end.Before(deadline) {
		deadline = b.end
	}
	_ = b.conn.SetReadDeadline(deadline)
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err == io.EOF && b.n < b.declared {
		// fasthttp ends a Content-Length body cut short by the client's
		// FIN with a plain EOF, which the copy upstream would report as
		// its own short write: the client left mid-body.
		err = io.ErrUnexpectedEOF
	}
	if b.n > b.max {
		// No bytes with the error: fasthttp's chunked writer sends whatever
		// a Read returns and only looks at the error when there is none.
		b.err = errBodyTooLarge
		return 0, b.err
	}
	if err != nil && err != io.EOF {
		// Deliver what arrived; the failure comes with the next Read.
		b.cause = err
		b.err = errors.Join(errClientBody, err)
		if n == 0 {
			return 0, b.err
		}
		return n, nil
	}
	return n, err
}
