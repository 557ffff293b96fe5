package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/peer"
)

// handleExpect runs for a request with "Expect: 100-continue" before its
// body is asked for, and does what handle does up to admission: the
// client is told to send its body only once the request is admitted, and
// a request that will not be forwarded (too large, rejected, malformed) is
// answered at once, its body never read; fasthttp then closes the
// connection. fasthttp sends the 100 when this returns StatusContinue,
// reads the body's first 8 KiB and calls handle, which finds the admitted
// exchange in the request's user values.
func (p *Proxy) handleExpect(ctx *fasthttp.RequestCtx) (status int) {
	e := p.exchanges.Get().(*exchange)
	e.begin(ctx)
	// fasthttp stamps the request's time only once its body is read;
	// until then ctx.Time is the previous request's.
	e.req.Start = time.Now()
	defer e.recoverExpect(ctx, &status)
	if !p.admitRequest(ctx, e) {
		return ctx.Response.StatusCode()
	}
	// The clock for the body's first 8 KiB starts with the 100, not with
	// the request's first byte, which may be a queue wait ago; and the 100
	// must not meet a write deadline a previous response left behind.
	now := time.Now()
	_ = ctx.Conn().SetReadDeadline(now.Add(p.server.ReadTimeout))
	if p.cut.Load() {
		// A drain's end came after admission and may have cut this
		// connection's reads before the deadline above replaced the cut:
		// the body is not waited for (see cutReads).
		_ = ctx.Conn().SetReadDeadline(aLongTimeAgo)
	}
	_ = ctx.Conn().SetWriteDeadline(now.Add(p.timeout))
	ctx.SetUserValue(continuedKey{}, (*continued)(e))
	return fasthttp.StatusContinue
}

// continuedKey is the request's user value under which handleExpect leaves
// an admitted exchange for handle.
type continuedKey struct{}

// continued is an exchange admitted by handleExpect and not yet taken up
// by handle. If handle never runs, because the 100 could not be written or
// the body's first bytes did not arrive, fasthttp resets the request, and
// with it the user values, which closes it: the permit is released and the
// request counted.
type continued exchange

// Close ends an admitted request whose body never came. Only network
// errors end it here (the size was checked before the 100), so the
// connection tells which: a client still connected stalled (it did not
// send its body, or did not read the 100); one that is not has left.
func (c *continued) Close() error {
	e := (*exchange)(c)
	ctx := e.ctx
	kind, status := ClientTimeout, fasthttp.StatusRequestTimeout
	if peer.Gone(ctx.Conn()) {
		kind, status = ClientClosed, StatusClientClosed
	}
	// After a failed read fasthttp calls handleMalformed next, with the
	// request reset: the mark on the response tells it that the request
	// is counted already. After a failed write nothing follows, and the
	// response is reset with the connection.
	setOutcomeHeader(&ctx.Response.Header, kind)
	e.abandon(kind, status)
	return nil
}

// takeContinued returns the exchange handleExpect admitted for ctx, if
// handle has not taken it up, and takes it.
func takeContinued(ctx *fasthttp.RequestCtx) *exchange {
	v := ctx.UserValue(continuedKey{})
	if v == nil {
		return nil
	}
	ctx.RemoveUserValue(continuedKey{})
	return (*exchange)(v.(*continued))
}
