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

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/internal/header"
	"github.com/loomgate/loomgate/internal/peer"
)

// What the proxy says in its own answers on HTTP/1.1 alone: short, plain
// and free of internal error text, which could leak addresses or
// versions. The answers every protocol gives are admission's (see
// admission.Gate.Answer).
const (
	textPlain          = admission.TextPlain
	msgHeadersTooLarge = "request headers too large\n"
	msgMalformed       = "malformed request\n"
	msgBareLF          = "malformed request: end lines with CRLF\n"
	msgVersion         = "HTTP version not supported: send HTTP/1.1\n"
	msgCoding          = "transfer coding not supported: send chunked or Content-Length\n"
	msgConnect         = "CONNECT is not supported: this is a reverse proxy, not a tunnel\n"
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
	// What one request leaves for the next: the response's buffers and
	// scratch space. The rest is one request's (exchangeState), cleared
	// whole when it ends (see finish), so that nothing of one request,
	// whatever field is added, reaches the next.
	resp                         fasthttp.Response // the upstream's
	buf, target, method, scratch []byte
	names                        [][]byte
	exchangeState
}

// exchangeState is one request's part of an exchange.
type exchangeState struct {
	// req is the request on its way through admission: its times, its
	// reservation, its Outcome.
	req admission.Request
	// ctx is the request's, for as long as the exchange is: fasthttp
	// reuses it for the connection's next request only once this one's
	// response is written.
	ctx *fasthttp.RequestCtx
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
	// ended is the client's connection when the client had sent its FIN
	// by the time the response was ready: closed or half-closed.
	ended net.Conn
	// unsent is set when the upstream answered before the request's body
	// was all sent: the rest is still on the client's connection.
	unsent bool

	up      upstreamConn // the connection resp arrives on
	reqBody requestBody
	body    io.Reader // what Read serves: &buffered or the upstream's stream
	// streaming is set when body is the upstream's stream, so that its
	// end marks the upstream's last byte and its failure is the upstream's.
	streaming bool
	readErr   error
	buffered  bytes.Reader
}

func (e *exchange) begin(ctx *fasthttp.RequestCtx) {
	// fasthttp read the clock once the request was read, which is where a
	// request's time starts: a clock read saved on every request.
	start := ctx.Time()
	if start.IsZero() {
		start = time.Now() // fasthttp's LazyRequestTime, or a test's ctx
	}
	e.req.Begin(start)
	e.ctx = ctx
	e.method = append(e.method[:0], ctx.Method()...)
	e.target = append(e.target[:0], ctx.Request.Header.RequestURI()...)
	o := &e.req.Record
	o.Method, o.Target, o.Remote = e.method, e.target, ctx.RemoteAddr()
}

// Watch is the context of a wait for admission, which ends if the client
// leaves (see internal/peer): the exchange is admission's Client.
func (e *exchange) Watch() (context.Context, func()) {
	return e.p.departures.Wait(e.ctx.Conn())
}

// Left looks once more, at admission after a wait: the watch peeks each
// waiter 50 ms after it queued, then less and less often, and a queue
// that moves faster admits most before their first peek. Only requests
// that waited pay for it; one admitted at once never comes here.
func (e *exchange) Left(context.Context) bool { return peer.Gone(e.ctx.Conn()) }

// Header is the request's header field name.
func (e *exchange) Header(name string) []byte { return e.ctx.Request.Header.Peek(name) }

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
	if err := e.roundTrip(req, e.req.AdmittedAt.Add(p.timeout)); err != nil {
		e.upstreamFailed(ctx, err)
		return
	}
	e.req.Record.UpstreamStatus = resp.StatusCode()

	length := resp.Header.ContentLength()
	switch {
	case !e.hasBody():
		e.req.ServedAt = time.Now()
		e.up.reusable = true
		e.releaseUpstream()
		e.buffered.Reset(nil)
		e.body = &e.buffered
	case length >= 0 && length <= ResponseBufferBytes && e.reserveResponse(length):
		if err := e.readBody(); err != nil {
			e.upstreamFailed(ctx, err)
			return
		}
		e.req.ServedAt = time.Now()
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
			e.req.Record.Kind = ClientClosed
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
	if e.req.ServedAt.IsZero() {
		return time.Since(e.req.Start)
	}
	return e.req.ServedAt.Sub(e.req.Start)
}

// reserveResponse charges a response body about to be buffered to the
// request's reservation, and reports false when the memory bulkhead cannot
// take it. Admission could not charge it: the size is known only now.
func (e *exchange) reserveResponse(length int) bool {
	return e.p.gate.Reserve(&e.req, int64(length))
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
			conn: ctx.Conn(), idle: e.p.bodyIdle, end: e.req.AdmittedAt.Add(e.p.timeout),
		}
		ctx.Request.SetBodyStream(&e.reqBody, declared)
	}
}

// refused answers a request refused for kind: by admission, or an upgrade
// beyond MaxUpgraded.
func (e *exchange) refused(ctx *fasthttp.RequestCtx, kind Kind) {
	switch kind {
	case BadRequest:
		// The declared body alone is more than the whole memory bulkhead
		// (see admission.Gate.Admit). The rest of the body is still
		// coming, and is not read.
		ctx.SetConnectionClose()
	case ClientClosed:
		// Nobody is left to read an answer; close rather than write one.
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusServiceUnavailable, kind, e.p.message(kind))
		return
	}
	e.answer(ctx, kind)
}

// answer answers with the proxy's own answer to kind, the one every
// protocol gives (see admission.Gate.Answer).
func (e *exchange) answer(ctx *fasthttp.RequestCtx, kind Kind) {
	status, msg, _ := e.p.gate.Answer(kind)
	e.respond(ctx, status, kind, msg)
}

// message is the text of the answer to kind.
func (p *Proxy) message(kind Kind) string {
	_, msg, _ := p.gate.Answer(kind)
	return msg
}

// upstreamFailed answers an admitted request whose upstream did not deliver
// a response. Nothing has been sent to the client yet.
func (e *exchange) upstreamFailed(ctx *fasthttp.RequestCtx, err error) {
	e.req.ServedAt = time.Now()
	// Whatever is left on the connection is out of step: it is closed.
	e.up.reusable = false
	e.releaseUpstream()
	switch {
	case errors.Is(err, errBodyTooLarge):
		// The upstream saw part of a body and then a broken stream; that
		// connection is gone, the client gets the real reason.
		ctx.SetConnectionClose()
		e.answer(ctx, BadRequest)
	case e.reqBody.cause != nil:
		// The client's fault, whichever way: its connection is out of step
		// and is closed. The cause is judged on its own, as the client's
		// connection reported it: on its way fasthttp's copy to the
		// upstream wraps it in an error of the upstream's connection.
		ctx.SetConnectionClose()
		switch cause := e.reqBody.cause; {
		case isTimeout(cause):
			e.answer(ctx, ClientTimeout)
		case clientGone(cause):
			e.respond(ctx, fasthttp.StatusBadRequest, ClientClosed, e.p.message(ClientClosed))
		default:
			e.respond(ctx, fasthttp.StatusBadRequest, BadRequest, msgMalformed)
		}
	case isTimeout(err):
		e.req.Record.UpstreamErr = err
		e.answer(ctx, UpstreamTimeout)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		// The dial failed for want of a descriptor of the proxy's own
		// (unbounded client connections took them all): the upstream is
		// not at fault, and a retry elsewhere may do better.
		e.p.log.Debug("no file descriptor to dial the upstream", "err", err)
		e.respond(ctx, fasthttp.StatusServiceUnavailable, InternalError, msgNoFiles)
	default:
		e.p.log.Debug("upstream failed", "err", err)
		e.req.Record.UpstreamErr = err
		e.answer(ctx, UpstreamError)
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
	e.req.Record.Kind = kind
	out := &ctx.Response
	out.Header.SetContentType(textPlain)
	setOutcomeHeader(&out.Header, kind)
	if kind.Rejection() {
		var retryAfter int64
		status, _, retryAfter = e.p.gate.Answer(kind)
		e.scratch = strconv.AppendInt(e.scratch[:0], retryAfter, 10)
		out.Header.SetCanonical(headerRetryAfter, e.scratch)
	}
	if cl := ctx.Request.Header.ContentLength(); !e.req.Admitted() && (kind.Rejection() || status == fasthttp.StatusRequestEntityTooLarge) &&
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

// addServerTiming adds the request's Server-Timing (see
// admission.Request.AppendServerTiming). For a streamed body the
// upstream's time is measured to its headers, the last moment before the
// header must be sent; the Outcome has the time to its last byte.
func (e *exchange) addServerTiming(ctx *fasthttp.RequestCtx) {
	if !e.p.timing {
		return
	}
	end := e.req.ServedAt
	if end.IsZero() && e.req.Admitted() {
		end = time.Now() // a streamed body: to its headers
	}
	e.scratch = e.req.AppendServerTiming(e.scratch[:0], end)
	// Added, not set: the upstream's own Server-Timing entries stay.
	ctx.Response.Header.AddBytesKV(headerServerTiming, e.scratch)
}

// handOff gives the exchange to fasthttp as the response body. It must be
// the handler's last act: from here fasthttp may close the exchange, and
// closing returns it to the pool.
func (e *exchange) handOff(ctx *fasthttp.RequestCtx, length, status int) {
	ctx.Response.SetStatusCode(status)
	e.req.Record.Status = status
	e.handedOff = true
	ctx.Response.SetBodyStream(e, length)
}

// Read serves the response body.
func (e *exchange) Read(b []byte) (int, error) {
	n, err := e.body.Read(b)
	if e.streaming && err != nil {
		if err == io.EOF {
			e.req.ServedAt = time.Now()
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
		if e.req.ServedAt.IsZero() {
			e.req.ServedAt = now
		}
	}
	o := &e.req.Record
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

// finish ends the request (see admission.Gate.Finish) and returns the
// exchange to its pool.
func (e *exchange) finish(now time.Time) {
	// A request that ends before its tunnel opens gives back the place it
	// reserved, on whatever path it ended: its client left after a 100
	// Continue, a panic, an answer of the proxy's own. Held on, each
	// would shrink MaxUpgraded and MaxClientConns for good.
	e.releaseUpgradePlace()
	e.p.gate.Finish(&e.req, now)

	// Only a bug leaves a connection here (a panic between the round trip
	// and the hand-off); it is out of step, and closed.
	e.up.reusable = false
	e.releaseUpstream()
	e.resp.Reset()
	e.exchangeState = exchangeState{}
	// Keep scratch buffers, but not a large body's: a pool full of 64 KiB
	// buffers would be memory held for nothing.
	if cap(e.buf) > 16<<10 {
		e.buf = nil
	}
	e.p.exchanges.Put(e)
}

// releaseUpgradePlace gives back the upgraded connection's place e holds,
// if it holds one.
func (e *exchange) releaseUpgradePlace() {
	if e.upgradePlace {
		e.upgradePlace = false
		e.p.upgrades.Unreserve()
	}
}

// abandon ends an admitted request that never reached the upstream because
// its body did not arrive, counting it as kind with status.
func (e *exchange) abandon(kind Kind, status int) {
	now := time.Now()
	e.req.ServedAt = now
	e.req.Record.Kind, e.req.Record.Status = kind, status
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
	if e.req.Admitted() && e.req.ServedAt.IsZero() {
		e.req.ServedAt = time.Now()
	}
	ctx.Response.Reset()
	e.answer(ctx, InternalError)
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

var _ io.Reader = (*exchange)(nil)
