package proxy

import (
	"cmp"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/header"
)

// bareLFAnswer is the whole answer to a first request whose header lines
// end in a bare LF.
var bareLFAnswer = []byte("HTTP/1.1 400 Bad Request\r\n" +
	"Content-Type: " + textPlain + "\r\n" +
	string(headerOutcome) + ": " + BadRequest.String() + "\r\n" +
	"Connection: close\r\n" +
	"Content-Length: " + strconv.Itoa(len(msgMalformed)) + "\r\n\r\n" +
	msgMalformed)

// refuseBareLF answers, at once, a connection whose first request ends its
// header lines in a bare LF. fasthttp frames a header block only at its
// CRLFCRLF, and would leave it waiting for one until HeaderTimeout; the
// request is whole, so the answer is 400 now (RFC 9112, 2.2 lets a server
// refuse bare LFs), counted bad_request. A later request on a kept-alive
// connection is fasthttp's to read, and still waits (see handleMalformed).
func (p *Proxy) refuseBareLF(c net.Conn) {
	start := time.Now()
	_ = c.SetWriteDeadline(start.Add(time.Second))
	_, _ = c.Write(bareLFAnswer)
	p.gate.Observe(&Outcome{Kind: BadRequest, Status: fasthttp.StatusBadRequest, Total: time.Since(start), Remote: c.RemoteAddr()})
	if tc, ok := c.(*net.TCPConn); ok {
		// Closing with the request unread would reset the connection, and
		// a reset can overtake the answer: end the answer, then read what
		// the client sent (a little, briefly) before the close.
		_ = tc.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
}

// handleMalformed answers requests fasthttp could not read; the handler never
// sees them.
func (p *Proxy) handleMalformed(ctx *fasthttp.RequestCtx, err error) {
	if p.cut.Load() && isTimeout(err) && strings.HasPrefix(err.Error(), "error when reading request headers") {
		// A drain's end cut a request inside its header block (see
		// cutReads): no request was made, and its connection is closed
		// without an answer or a count, as the drain leaves it. fasthttp
		// writes the answer regardless; the close makes that write fail.
		// The text is fasthttp's, as BareLFBlock's.
		_ = ctx.Conn().Close()
		return
	}
	status, kind, msg := fasthttp.StatusBadRequest, BadRequest, msgMalformed
	recorded := 0 // the status the Outcome records, when not the one sent
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.As(err, &small):
		status, msg = fasthttp.StatusRequestHeaderFieldsTooLarge, msgHeadersTooLarge
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, msg = fasthttp.StatusRequestEntityTooLarge, p.message(BadRequest)
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding):
		// fasthttp's sentinel, where an unknown coding has an error of its
		// own (below), is what a request gets for Transfer-Encoding in
		// HTTP/1.0: faulty framing (RFC 9112, 6.1), 400 and close, not a
		// coding it lacks. Both are pinned by a test.
	case strings.Contains(err.Error(), "unsupported transfer-encoding"):
		// fasthttp has no error value for it; its text is pinned by a
		// test. RFC 9112 (6.1): a coding the server does not understand
		// is 501.
		status, msg = fasthttp.StatusNotImplemented, msgCoding
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		// (io.EOF comes only from a body asked for with 100 Continue:
		// fasthttp ends a connection that closes before a request quietly.)
		// The connection ended inside the request (a body cut short, or
		// its header block): the client left, by a close or a reset, or
		// half-closed with its request unfinished. Answered
		// in case it still reads; recorded as nginx's 499, as for a client
		// that leaves later.
		kind, msg, recorded = ClientClosed, p.message(ClientClosed), StatusClientClosed
	case errors.As(err, &netErr) && netErr.Timeout() && header.BareLFBlock(err):
		// A complete header block with bare LF line ends: fasthttp frames
		// a block only at its CRLFCRLF and waited for one. The client did
		// not stall; its framing is one loomgate does not take (RFC 9112,
		// 2.2 leaves it to the server).
		msg = msgBareLF
	case errors.As(err, &netErr) && netErr.Timeout():
		// Headers or a small body that did not arrive in time: a client
		// that did not send its request in time. (A connection that sent
		// nothing is closed by fasthttp and never reaches here.)
		status, kind, msg = fasthttp.StatusRequestTimeout, ClientTimeout, p.message(ClientTimeout)
	}
	// A request admitted by handleExpect whose body then failed to arrive
	// was counted when fasthttp reset it (see continued.Close).
	counted := len(ctx.Response.Header.PeekBytes(headerOutcome)) > 0
	// Not Response.Reset, which would also clear the NoDefaultDate the
	// server set on the response, and fasthttp would add a Date of its
	// own. The mark above is all the response can hold here, and it is set
	// anew below.
	ctx.Response.ResetBody()
	ctx.Response.SetStatusCode(status)
	ctx.Response.Header.SetContentType(textPlain)
	setOutcomeHeader(&ctx.Response.Header, kind)
	ctx.Response.SetBodyString(msg)
	p.log.Debug("malformed request", "remote", ctx.RemoteAddr().String(), "status", status, "err", err)
	switch e := takeContinued(ctx); {
	case e != nil:
		// Admitted by handleExpect and not reset by fasthttp.
		e.abandon(kind, cmp.Or(recorded, status))
	case !counted:
		p.observeUnhandled(ctx, kind, cmp.Or(recorded, status))
	}
}

// observeUnhandled reports a request answered before the handler ran.
//
// fasthttp resets a request whose header block or body failed to arrive
// before it calls handleMalformed: its method and target are gone, and
// ctx's would read as "GET /". They are taken only from a header block
// that is still there (a target fasthttp's URI parser refused), and are
// otherwise left empty, as the access log leaves a remote it does not
// know. ctx.Time is stamped only once a request is read whole, and is
// zero here. fasthttp arms ReadTimeout (HeaderTimeout) at each request's
// first byte and sets no other read deadline before the handler, so the
// connection's read deadline less HeaderTimeout is the request's start,
// to fasthttp's own clock reading. Where the connection does not tell its
// deadline (off Linux), or a drain's end has cut it, the start is unknown
// and Total is 0.
func (p *Proxy) observeUnhandled(ctx *fasthttp.RequestCtx, kind Kind, status int) {
	e := p.exchanges.Get().(*exchange)
	now := time.Now()
	e.begin(ctx)
	e.req.Start = now
	if c, ok := ctx.Conn().(interface{ ReadDeadline() time.Time }); ok {
		if d := c.ReadDeadline(); !d.IsZero() {
			if start := d.Add(-p.server.ReadTimeout); start.Before(now) && now.Sub(start) <= p.server.ReadTimeout+time.Second {
				e.req.Start = start
			}
		}
	}
	o := &e.req.Record
	if len(ctx.Request.Header.RawHeaders()) == 0 {
		o.Method, o.Target = nil, nil
	}
	o.Kind, o.Status = kind, status
	e.finish(now)
}
