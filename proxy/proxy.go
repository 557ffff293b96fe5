package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/internal/h2c"
	"github.com/loomgate/loomgate/internal/header"
	"github.com/loomgate/loomgate/internal/listen"
	"github.com/loomgate/loomgate/internal/peer"
	"github.com/loomgate/loomgate/internal/rawio"
	"github.com/loomgate/loomgate/internal/sniff"
	"github.com/loomgate/loomgate/internal/tunnel"
	"github.com/loomgate/loomgate/limiter"
)

// Proxy forwards requests to one upstream. Create it with New.
type Proxy struct {
	// gate is the admission path of every request, whatever its protocol.
	gate     *admission.Gate
	policy   limiter.Policy
	timeout  time.Duration
	bodyIdle time.Duration
	maxBody  int64
	timing   bool
	// rejectStatus answers admission's rejections: 503 or 429.
	rejectStatus int
	retryAfter   func(Kind) time.Duration
	log          *slog.Logger

	client *fasthttp.HostClient
	server *fasthttp.Server
	host   string // upstream host:port, for requests that arrive without Host

	exchanges  sync.Pool
	departures peer.Departures
	upgrades   *tunnel.Set
	// pending are the tunnels whose connection fasthttp has yet to hand
	// over, by client connection: if fasthttp closes it instead,
	// connState ends the tunnel. npending spares every other close the
	// look-up.
	pending  sync.Map
	npending atomic.Int64
	h2       *h2c.Server // HTTP/2 with prior knowledge
	// upstreams are the upstream connections, HTTP/1 and HTTP/2: cut when
	// a drain's time is up (see Shutdown), and cut is set then.
	upstreams rawio.Group
	cut       atomic.Bool
	// clients are the client connections fasthttp serves (HTTP/2 and
	// upgraded ones are not), so that a drain's end can stop the reads of
	// those still sending a request (see cutReads).
	clients listen.Conns

	maxClientConns int
	// acceptErrors counts failed accepts that were retried.
	acceptErrors atomic.Uint64
	// lastAcceptLog is when a failed accept was last logged (UnixNano).
	lastAcceptLog atomic.Int64

	// mu orders Serve and Shutdown: whichever comes second sees the
	// other's mark, so a shutdown during start-up stops the Serve that
	// starts after it.
	mu       sync.Mutex
	ln       atomic.Pointer[listen.Listener]
	stopping bool
	served   chan struct{} // closed when Serve returns; nil before Serve
}

// New validates cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	addr, _ := ParseUpstream(cfg.Upstream)
	// The Host the upstream is asked for is the URL's, as url.Parse reads
	// it: the scheme's case is the URL's own affair, not the host's.
	u, _ := url.Parse(cfg.Upstream)
	host := u.Host
	p := &Proxy{
		policy:       cfg.Policy,
		timeout:      cfg.UpstreamTimeout,
		bodyIdle:     cfg.BodyTimeout,
		maxBody:      cfg.MaxBodyBytes,
		timing:       cfg.ServerTiming,
		rejectStatus: cmp.Or(cfg.RejectStatus, fasthttp.StatusServiceUnavailable),
		retryAfter:   cfg.RetryAfter,
		log:          cfg.Logger,
		host:         host,

		maxClientConns: cfg.MaxClientConns,
	}
	if p.timeout == 0 {
		p.timeout = 60 * time.Second
	}
	if p.maxBody == 0 {
		p.maxBody = 16 << 20
	}
	if p.bodyIdle == 0 {
		p.bodyIdle = 10 * time.Second
	}
	headerTimeout := cfg.HeaderTimeout
	if headerTimeout == 0 {
		headerTimeout = 10 * time.Second
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.gate = admission.New(admission.Config{
		Policy: cfg.Policy, Observer: cfg.Observer, Classes: cfg.Classes, Reserve: cfg.Reserve,
		RejectStatus: cfg.RejectStatus, RetryAfter: cfg.RetryAfter, Logger: p.log,
		Priorities: cfg.Priorities,
	})
	maxConns := cfg.MaxConns
	if maxConns == 0 {
		maxConns = math.MaxInt32
	}
	// Only the pool of the HostClient is used: the exchange makes its own
	// round trip on it (see roundTrip), never Do, so none of Do's settings
	// (retries, user agent, response streaming) apply.
	p.client = &fasthttp.HostClient{
		Addr:     addr,
		MaxConns: maxConns,
		// The pool is sized to the admission limit and a connection is back
		// before its permit, so nothing should wait here; if something ever
		// does, the wait is bounded and lands in service time.
		MaxConnWaitTimeout: p.timeout,
		ReadBufferSize:     MaxHeaderBytes,
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			return dialAside(addr, timeout, &p.upstreams)
		},
	}
	p.server = &fasthttp.Server{
		Handler:               p.handle,
		ErrorHandler:          p.handleMalformed,
		ExpectHandler:         p.handleExpect,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		ReadBufferSize:        MaxHeaderBytes,
		// A connection's 4 KiB writer goes back to the pool after each
		// response instead of staying with the connection: a request held
		// at the upstream or in the queue costs no writer. The price is a
		// buffer taken per response, from a pool. It also makes fasthttp
		// read a new connection's first byte on its own: a connection that
		// sends nothing within HeaderTimeout is closed without an answer,
		// as no request arrived.
		ReduceMemoryUsage: true,
		// With StreamRequestBody, fasthttp reads at most 8 KiB of a body
		// before the handler and streams the rest; the body limit is
		// enforced by the handler, which knows what to count.
		StreamRequestBody:            true,
		MaxRequestBodySize:           intBytes(p.maxBody),
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		// ReadTimeout runs from a request's first byte to the end of what
		// fasthttp reads before the handler: a slowloris client is cut
		// there, and a half-sent request holds a graceful shutdown no
		// longer than this.
		ReadTimeout: headerTimeout,
		IdleTimeout: 90 * time.Second,
		// A client that will not read its response must not hold a permit
		// forever.
		WriteTimeout: p.timeout,
		Logger:       fasthttpLogger{p.log},
		ConnState:    p.connState,
	}
	p.exchanges.New = func() any { return &exchange{p: p} }
	p.upgrades = tunnel.NewSet(tunnel.Config{
		Max: cfg.MaxUpgraded, Idle: cfg.UpgradedIdleTimeout, Closed: cfg.UpgradedClosed,
		Released: p.connDone, Logger: p.log,
	})
	p.h2 = h2c.New(h2c.Config{
		Gate: p.gate, Upstream: cfg.Upstream, Dial: p.dialH2,
		UpstreamTimeout: p.timeout, HeaderTimeout: headerTimeout, BodyTimeout: p.bodyIdle,
		MaxBodyBytes: p.maxBody, MaxHeaderBytes: MaxHeaderBytes, AnswerBytes: RequestOverheadBytes,
		ServerTiming: p.timing, Cut: p.cut.Load, Closed: p.connDone, Logger: p.log,
	})
	return p, nil
}

// intBytes is n as an int, at most math.MaxInt: MaxBodyLimit is one more
// than a 32-bit int holds.
func intBytes(n int64) int {
	return int(min(n, math.MaxInt))
}

// Serve accepts connections on ln until Shutdown, which may come first:
// Serve then closes ln and returns nil at once. It returns nil after
// Shutdown, or the listener's error if it failed for good. A Proxy
// serves one listener once.
func (p *Proxy) Serve(ln net.Listener) error {
	l := listen.New(ln, p.maxClientConns, &p.acceptErrors, p.acceptFailed)
	p.mu.Lock()
	if p.stopping || p.served != nil {
		stopping := p.stopping
		p.mu.Unlock()
		l.Close()
		if stopping {
			return nil
		}
		return errors.New("proxy: Serve called twice")
	}
	p.ln.Store(l)
	p.upgrades.Bound(l)
	p.served = make(chan struct{})
	p.mu.Unlock()
	defer close(p.served)
	// HTTP/2 connections go to p.h2; fasthttp gets the rest, raw. A
	// connection that sends nothing in the header timeout is closed
	// without an answer, as fasthttp would.
	sn := sniff.New(l, p.h2.Serve, p.server.ReadTimeout, l.ConnClosed)
	sn.RefuseBareLF(p.refuseBareLF)
	err := p.server.Serve(rawListener{sn, &p.clients})
	p.mu.Lock()
	stopping := p.stopping
	p.mu.Unlock()
	if stopping && errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// handle serves one request. Every path ends in e.respond or e.forward,
// which hand the exchange to fasthttp as the response body; fasthttp closes
// it once the response is written, and that close releases the permit and
// reports the Outcome.
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) {
	defer p.closeIfCut(ctx)
	if v := ctx.UserValue(continuedKey{}); v != nil {
		// Admitted by handleExpect before its body was asked for.
		ctx.RemoveUserValue(continuedKey{})
		e := (*exchange)(v.(*continued))
		defer e.recoverPanic(ctx)
		e.pass(ctx)
		return
	}
	e := p.exchanges.Get().(*exchange)
	e.begin(ctx)
	defer e.recoverPanic(ctx)
	if p.admitRequest(ctx, e) {
		e.pass(ctx)
	}
}

// pass sends an admitted request on: an Upgrade (WebSocket) to be relayed
// once the upstream agrees, anything else to be forwarded.
func (e *exchange) pass(ctx *fasthttp.RequestCtx) {
	if e.upgrading {
		e.upgrade(ctx)
		return
	}
	e.forward(ctx)
}

// admitRequest checks a request and asks for its admission. It reports
// whether the request was admitted; if not, it has answered it.
func (p *Proxy) admitRequest(ctx *fasthttp.RequestCtx, e *exchange) bool {
	req := &ctx.Request
	if !header.ValidVersion(req.Header.Protocol()) {
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusHTTPVersionNotSupported, BadRequest, msgVersion)
		return false
	}
	// One pass over the header block checks it and notes the fields
	// prepareRequest will rewrite.
	fields, ok := header.Scan(req.Header.RawHeaders())
	if !ok {
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusBadRequest, BadRequest, msgMalformed)
		return false
	}
	e.fields = fields
	if fields&header.Coding != 0 && req.Header.ContentLength() != -1 {
		// A Transfer-Encoding fasthttp let through that is not chunked:
		// "identity", which it reads as no body, so that the body, had
		// the client sent one, would be read as the next request and
		// forwarded unchecked. Not a coding of HTTP/1.1 (RFC 9112, 6.1):
		// 501, as for any coding the proxy does not know, and close.
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusNotImplemented, BadRequest, msgCoding)
		return false
	}
	if t := req.Header.RequestURI(); len(t) > 0 && t[0] != '/' {
		if authority, ok := header.AbsoluteAuthority(t); ok && !header.ValidAuthority(authority) {
			e.respond(ctx, fasthttp.StatusBadRequest, BadRequest, msgMalformed)
			return false
		}
	}
	if req.Header.IsConnect() {
		// A reverse proxy forwards requests to one service; it is no
		// tunnel. 405 with the methods it forwards (RFC 9110, 9.3.6).
		ctx.Response.Header.SetCanonical(headerAllow, valueAllow)
		e.respond(ctx, fasthttp.StatusMethodNotAllowed, BadRequest, msgConnect)
		return false
	}
	declared := req.Header.ContentLength()
	if int64(declared) > p.maxBody {
		// The rest of the body is still coming; closing is cheaper than
		// reading it to keep the connection.
		ctx.SetConnectionClose()
		e.answer(ctx, BadRequest)
		return false
	}
	length := declared
	if length == -2 {
		// fasthttp's "identity": neither Content-Length nor chunked,
		// which in a request means no body at all (RFC 9112, 6.3).
		length = 0
	}
	e.req.Length = max(length, -1)
	upgrade := isUpgrade(&req.Header)
	e.upgrading = upgrade
	if upgrade && !p.upgrades.Reserve() {
		e.refused(ctx, RejectedUpgraded)
		return false
	}
	e.upgradePlace = upgrade
	if !p.gate.Admit(&e.req, e) {
		e.releaseUpgradePlace()
		e.refused(ctx, e.req.Record.Kind)
		return false
	}
	return true
}

// fasthttpLogger routes fasthttp's own messages (mostly connections that
// broke) to the debug level: each is also an Outcome or a closed idle
// connection, and at info they would flood the log under load.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(format, args...), "source", "fasthttp")
	}
}

// connState hears of every client connection's end, once, from fasthttp.
// A hijacked connection is not closed yet: whoever took it reports its
// end by connDone.
func (p *Proxy) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateClosed:
		p.clients.Remove(c)
		if p.npending.Load() > 0 {
			p.abandoned(c)
		}
		p.connDone()
	case fasthttp.StateHijacked:
		// A tunnel's now: the drain ends it with close frames, and its
		// reads are not to be cut under them.
		p.clients.Remove(c)
	}
}

// connDone gives back a closed client connection's place.
func (p *Proxy) connDone() {
	if ln := p.ln.Load(); ln != nil {
		ln.ConnClosed()
	}
}

// rawListener hands fasthttp connections whose reads and writes are raw
// system calls. Announced ones wake the runtime's monitor thread after
// every idle spell, once a request at a moderate rate: measured at 5000
// rps on one CPU, 33 µs of CPU a request with them and 27 without
// (package rawio has why).
//
// It also notes each connection in clients, for a drain's end.
type rawListener struct {
	net.Listener
	clients *listen.Conns
}

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c = rawio.Wrap(c)
	l.clients.Add(c)
	return c, nil
}

// closeIfCut makes an answer given after a drain's time is up its
// connection's last: the drain waits for those connections to close as
// the sign that their answers are out (see cutShort), and a connection
// kept alive would hold it to cutGrace, then be closed by the exit.
func (p *Proxy) closeIfCut(ctx *fasthttp.RequestCtx) {
	if p.cut.Load() {
		ctx.SetConnectionClose()
	}
}
