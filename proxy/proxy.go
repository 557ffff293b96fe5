package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/field"
	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/internal/h2c"
	"github.com/loomgate/loomgate/internal/header"
	"github.com/loomgate/loomgate/internal/listen"
	"github.com/loomgate/loomgate/internal/peer"
	"github.com/loomgate/loomgate/internal/rawio"
	"github.com/loomgate/loomgate/internal/sniff"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/route"
)

// Observer receives each request's Outcome once, after its response.
// Observe is called concurrently and on the request's path: it must be quick.
type Observer = admission.Observer

// Sizes that bound what one request can hold in the proxy's memory.
const (
	// MaxHeaderBytes bounds a request's line and headers; beyond it the
	// answer is 431. Tomcat's maxHttpHeaderSize has the same default.
	MaxHeaderBytes = 8 << 10
	// RequestPrefetchBytes is how much of a request body fasthttp reads
	// before the handler runs; the rest streams to the upstream.
	RequestPrefetchBytes = 8 << 10
	// ResponseBufferBytes is the largest response body read whole before it
	// is sent on: the upstream's time is then exact in Server-Timing, and a
	// failure mid-body still gets a clean 502. Larger bodies stream.
	ResponseBufferBytes = 64 << 10
	// MaxBodyLimit is the largest Config.MaxBodyBytes: 2 GiB. A body
	// larger than that belongs in object storage, not in a request held
	// through admission.
	MaxBodyLimit = 2 << 30
)

// Config describes a Proxy.
type Config struct {
	// Upstream is the service's address as http://host:port. Required.
	Upstream string
	// Policy admits requests, whatever their protocol: a *limiter.Limiter,
	// or a *limiter.DryRun. Required.
	Policy limiter.Policy
	// Observer receives each request's Outcome. If nil, outcomes are dropped.
	Observer Observer
	// Classes sorts requests into route classes, once each, as they meet
	// admission: the Outcome's Class. If nil, automatically (method and
	// first path segment; see route.Parse).
	Classes *route.Classes
	// UpstreamTimeout bounds an admitted request from admission to the
	// upstream's last response byte, and the writing of its response (a
	// client that reads it slower is cut off, counted ClientTimeout). If
	// zero, 60s.
	UpstreamTimeout time.Duration
	// MaxBodyBytes is the largest request body accepted; a larger one is
	// answered 413 without reaching the upstream. If zero, 16 MiB.
	MaxBodyBytes int64
	// HeaderTimeout bounds the reading of a request's line, headers and
	// first 8 KiB of body, from its first byte: a client that takes longer
	// gets 408 and its connection is closed, before it meets admission.
	// With "Expect: 100-continue" the body is asked for once the request is
	// admitted, and its first 8 KiB get as long again from the 100. A new
	// connection that sends nothing for this long is closed without an
	// answer. If zero, 10s.
	HeaderTimeout time.Duration
	// BodyTimeout bounds each pause in the rest of a request body, which
	// streams to the upstream after admission: a client that sends nothing
	// for this long gets 408, counted ClientTimeout, and its permit is
	// released. UpstreamTimeout bounds the whole upload too. If zero, 10s.
	BodyTimeout time.Duration
	// MaxConns caps connections to the upstream. Set it to the admission
	// limit: a smaller pool would be a second, unmeasured queue. If zero,
	// connections are not capped.
	MaxConns int
	// MaxClientConns bounds the client connections open at once; at the
	// bound new connections wait in the listener's backlog until one
	// closes. Size it so that the descriptors left serve the upstream
	// connections and the admin listener. If zero, unbounded.
	MaxClientConns int
	// ServerTiming adds the Server-Timing header to every response.
	ServerTiming bool
	// RejectStatus answers a rejection by admission: 503 or 429. Clients
	// that honour 429 with Retry-After (Kubernetes clients, many SDKs)
	// back off on it, where a 503 may read as the service failing. If
	// zero, 503.
	RejectStatus int
	// RetryAfter returns the delay a rejected client is told to wait, for
	// the Retry-After header; it is rounded up to whole seconds, at least 1.
	// If nil, 1 second.
	RetryAfter func(Kind) time.Duration
	// Reserve returns the bytes a request reserves from the Policy, given
	// its declared body length (-1 when unknown); RequestBytes is the
	// proxy's own measure. If nil, 0. Independently of it, a response body
	// the proxy buffers is charged when its headers arrive.
	Reserve func(contentLength int) int64
	// MaxUpgraded bounds the upgraded connections (WebSocket) open at
	// once; a handshake beyond it is answered like a rejection, counted
	// RejectedUpgraded. If zero, unbounded. See upgrade.go.
	MaxUpgraded int
	// UpgradedIdleTimeout closes an upgraded connection that carried no
	// byte either way for this long. If zero, never.
	UpgradedIdleTimeout time.Duration
	// UpgradedClosed, if set, is told of each upgraded connection's end.
	UpgradedClosed func(Upgraded)
	// Logger receives the process log. If nil, slog.Default().
	Logger *slog.Logger
}

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
	upgrades   upgrades
	h2         *h2c.Server // HTTP/2 with prior knowledge
	// upstreams are the upstream connections, HTTP/1 and HTTP/2: cut when
	// a drain's time is up (see Shutdown), and cut is set then.
	upstreams rawio.Group
	cut       atomic.Bool
	// clients are the client connections fasthttp serves (HTTP/2 and
	// upgraded ones are not), so that a drain's end can stop the reads of
	// those still sending a request (see cutReads).
	clients clientConns

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

// ParseUpstream checks an upstream address and returns the host:port to
// dial. It accepts exactly what the proxy can honour: plain HTTP to one
// host and port. A path prefix would have to be rewritten into every
// request, which the proxy deliberately does not do (targets are forwarded
// byte for byte).
func ParseUpstream(raw string) (addr string, err error) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return "", errors.New("is empty")
	case err != nil:
		return "", errors.New("is not a URL")
	case u.Scheme != "http":
		return "", errors.New("is not an http:// URL")
	case u.Hostname() == "":
		return "", errors.New("has no host")
	case u.User != nil:
		return "", errors.New("has user information, which is not supported")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.ForceQuery, u.Fragment != "", u.Opaque != "":
		return "", errors.New("has a path, query or fragment, which are not supported")
	}
	port := u.Port()
	if port == "" {
		return net.JoinHostPort(u.Hostname(), "80"), nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("has port %s; want 1 to 65535", port)
	}
	return u.Host, nil
}

// Validate reports every problem of cfg as *field.Error values joined,
// or nil.
func (cfg Config) Validate() error {
	var problems []error
	bad := func(name, problem string) {
		problems = append(problems, &field.Error{Part: "proxy", Field: name, Problem: problem})
	}
	if _, err := ParseUpstream(cfg.Upstream); err != nil {
		bad("Upstream", err.Error())
	}
	if cfg.Policy == nil {
		bad("Policy", "is nil")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"UpstreamTimeout", cfg.UpstreamTimeout}, {"HeaderTimeout", cfg.HeaderTimeout}, {"BodyTimeout", cfg.BodyTimeout}} {
		if d.v < 0 {
			bad(d.field, fmt.Sprintf("is %v; want 0 (the default) or more", d.v))
		}
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxBodyBytes > MaxBodyLimit {
		bad("MaxBodyBytes", fmt.Sprintf("is %d; want 0 (the default) to %d (2 GiB)", cfg.MaxBodyBytes, MaxBodyLimit))
	}
	if cfg.RejectStatus != 0 && cfg.RejectStatus != fasthttp.StatusServiceUnavailable && cfg.RejectStatus != fasthttp.StatusTooManyRequests {
		bad("RejectStatus", fmt.Sprintf("is %d; want 503 or 429", cfg.RejectStatus))
	}
	if cfg.MaxConns < 0 {
		bad("MaxConns", fmt.Sprintf("is %d; want 0 (no cap) or more", cfg.MaxConns))
	}
	if cfg.MaxClientConns < 0 {
		bad("MaxClientConns", fmt.Sprintf("is %d; want 0 (no bound) or more", cfg.MaxClientConns))
	}
	if cfg.MaxUpgraded < 0 {
		bad("MaxUpgraded", fmt.Sprintf("is %d; want 0 (no bound) or more", cfg.MaxUpgraded))
	}
	if cfg.UpgradedIdleTimeout < 0 {
		bad("UpgradedIdleTimeout", fmt.Sprintf("is %v; want 0 (none) or more", cfg.UpgradedIdleTimeout))
	}
	return errors.Join(problems...)
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
	p.upgrades.max = int64(cfg.MaxUpgraded)
	p.upgrades.idle = cfg.UpgradedIdleTimeout
	p.upgrades.closed = cfg.UpgradedClosed
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
	p.upgrades.slots.Store(l)
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

// Shutdown stops accepting connections and waits until every request in
// progress, queued or admitted, has its response, or ctx ends. It returns
// nil when the drain was complete: every request answered, or none queued
// or in flight when ctx ended (what is left then, such as a connection
// between requests or inside a request's headers, or an upgraded one, is
// closed, and no request was cut short). It returns ctx.Err() when ctx
// ended with requests queued or in flight, which it then answers (see
// cutShort).
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.stopping = true
	ln, served := p.ln.Load(), p.served
	p.mu.Unlock()
	if ln == nil {
		// Serve has not begun; it will see stopping and not serve.
		return nil
	}
	// Closing the listener first ends Serve's accept loop whether or not
	// fasthttp has registered the listener yet: if it has not, its own
	// shutdown would return at once and leave Serve accepting.
	ln.Close()
	select {
	case <-served:
	case <-ctx.Done():
		if p.left().any() {
			return ctx.Err()
		}
		return nil
	}
	// Serve has returned, so fasthttp knows the listener and counts every
	// connection it accepted: its shutdown waits for them. Upgraded
	// connections are no longer fasthttp's: they are drained beside it.
	// So are HTTP/2 connections, which get a GOAWAY and finish their
	// streams.
	drained := make(chan error, 1)
	go func() {
		p.upgrades.drain(ctx)
		drained <- nil
	}()
	go func() { drained <- p.h2.Shutdown(ctx) }()
	err := p.server.ShutdownWithContext(ctx)
	for range 2 {
		err = cmp.Or(err, <-drained)
	}
	if ctx.Err() != nil {
		// Complete or not is what was left at the cut: cutShort answers
		// and releases it, so nothing read after could tell.
		err = nil
		if p.cutShort() {
			err = ctx.Err()
		}
	}
	p.h2.Close()
	return err
}

// leftAtCut is what a drain's end found unfinished.
type leftAtCut struct {
	queued, inFlight, streams int64
}

// any reports whether requests were left: queued, or holding a permit.
// An HTTP/2 stream that holds one is among them; a gRPC stream past its
// headers holds none, and, like an upgraded connection, is ended (see
// h2.drained) and leaves the drain complete: a watch may last for hours,
// and no drain would ever be complete beside it.
func (l leftAtCut) any() bool {
	return l.queued > 0 || l.inFlight > 0
}

// left is what is unfinished now: the requests queued and admitted, and
// the HTTP/2 streams open, among them gRPC streams past their headers,
// which are cut short too.
func (p *Proxy) left() leftAtCut {
	st := p.policy.Stats()
	return leftAtCut{queued: st.Queued, inFlight: st.InFlight, streams: p.h2.Open()}
}

// cutGrace is how long the requests cut short at a drain's end have to
// write their answers.
const cutGrace = time.Second

// cutShort ends, when a drain's time is up, what would otherwise end
// without an answer when the process exits: the requests still queued are
// rejected as at their queue timeout, those still waiting for the
// upstream fail as at UpstreamTimeout, and those whose client is still
// sending what fasthttp reads before the handler (headers, a small body,
// or, after a 100 Continue, the body's first 8 KiB) fail as at
// HeaderTimeout, each answered (503, 504 or 408, and the connection
// closed) and counted. It waits up to cutGrace for their
// answers, and reports whether anything was left to cut short, as it was
// at the cut: once it returns, nothing is.
func (p *Proxy) cutShort() bool {
	p.cut.Store(true)
	left := p.left()
	if left.any() {
		p.log.Warn("drain's time is up: the requests still queued are answered as at their queue timeout, those at the upstream as at UPSTREAM_TIMEOUT, those whose client is still sending as at HEADER_TIMEOUT",
			"queued", left.queued, "in_flight", left.inFlight, "http2_streams", left.streams)
	} else {
		p.log.Info("drain's time is up with no request queued or in flight; closing the connections left, and ending the gRPC streams past their headers with UNAVAILABLE",
			"http2_streams", left.streams)
	}
	p.policy.RejectWaiting()
	p.upstreams.Cut()
	p.clients.cutReads()
	grace, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	h2done := make(chan struct{})
	go func() {
		_ = p.h2.Shutdown(grace)
		close(h2done)
	}()
	// The answers are waited for here, not by fasthttp's shutdown: its
	// listeners are closed already, and then it returns at once, which
	// let the process exit while the answers were being written (most
	// of them lost, uncounted by the client). Each HTTP/1 request cut
	// short is answered with its connection closed, so the count of those
	// connections falls as the answers go out; one still inside its
	// headers keeps it up to cutGrace. HTTP/2 connections are the h2
	// shutdown's: a GOAWAY, the streams' answers, then the close.
	for p.ClientConns() > p.h2.Conns() && grace.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	<-h2done
	return left.any()
}

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

// connState hears of every client connection's end, once, from fasthttp.
// A hijacked connection is not closed yet: whoever took it reports its
// end by connDone.
func (p *Proxy) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateClosed:
		p.clients.remove(c)
		if p.upgrades.npending.Load() > 0 {
			p.upgrades.abandoned(c)
		}
		p.connDone()
	case fasthttp.StateHijacked:
		// A tunnel's now: the drain ends it with close frames, and its
		// reads are not to be cut under them.
		p.clients.remove(c)
	}
}

// clientConns are the client connections fasthttp serves. Each costs a
// map entry from its accept to its close, nothing per request.
type clientConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (cc *clientConns) add(c net.Conn) {
	cc.mu.Lock()
	if cc.conns == nil {
		cc.conns = make(map[net.Conn]struct{})
	}
	cc.conns[c] = struct{}{}
	cc.mu.Unlock()
}

func (cc *clientConns) remove(c net.Conn) {
	cc.mu.Lock()
	delete(cc.conns, c)
	cc.mu.Unlock()
}

// cutReads makes every client connection's read deadline pass, at a
// drain's end. What fasthttp reads before the handler (a small body, the
// body of one admitted after a 100 Continue) fails then as at
// HeaderTimeout: the request is answered 408 and counted (see
// handleMalformed and continued.Close), and its connection closes,
// where it was dropped unanswered and uncounted when the process exited
// (after a 100 Continue, with a permit held). A connection between
// requests closes without an answer, as at its idle timeout. A handler
// reads a client only for a body over 8 KiB, and a read blocked there
// ends as at UpstreamTimeout, whose deadline it also has (408); every
// later read sets its own deadline. One inside its header block is no
// request yet, and is closed unanswered (see handleMalformed). Answers
// being written are untouched: only reads are cut.
func (cc *clientConns) cutReads() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for c := range cc.conns {
		_ = c.SetReadDeadline(aLongTimeAgo)
	}
}

// aLongTimeAgo is a deadline that has passed, whenever it is set.
var aLongTimeAgo = time.Unix(1, 0)

// connDone gives back a closed client connection's place.
func (p *Proxy) connDone() {
	if ln := p.ln.Load(); ln != nil {
		ln.ConnClosed()
	}
}

// ClientConns is the number of client connections open now.
func (p *Proxy) ClientConns() int64 {
	ln := p.ln.Load()
	if ln == nil {
		return 0
	}
	return ln.Open()
}

// AcceptErrors is the number of failed accepts retried so far (out of
// descriptors, most often).
func (p *Proxy) AcceptErrors() uint64 { return p.acceptErrors.Load() }

// acceptFailed logs a retried accept failure, at most one line every ten
// seconds: under a flood every accept fails.
func (p *Proxy) acceptFailed(err error) {
	now := time.Now().UnixNano()
	last := p.lastAcceptLog.Load()
	if now-last < int64(10*time.Second) || !p.lastAcceptLog.CompareAndSwap(last, now) {
		return
	}
	p.log.Warn("accepting a connection failed; retrying. If out of file descriptors, raise the open-file limit or lower LOOMGATE_MAX_CONNS",
		"err", err, "client_conns", p.ClientConns(), "accept_errors", p.acceptErrors.Load())
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

// closeIfCut makes an answer given after a drain's time is up its
// connection's last: the drain waits for those connections to close as
// the sign that their answers are out (see cutShort), and a connection
// kept alive would hold it to cutGrace, then be closed by the exit.
func (p *Proxy) closeIfCut(ctx *fasthttp.RequestCtx) {
	if p.cut.Load() {
		ctx.SetConnectionClose()
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
	if upgrade && !p.upgrades.reserve() {
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

// dialAside dials the upstream on a goroutine of its own. Dialling takes
// the deepest stack of a request's whole path, and a goroutine's stack,
// once grown, stays grown while the request that grew it waits: dialled in
// the request's goroutine, every connection's first request would leave
// its client's goroutine with twice the stack for as long as it lives.
func dialAside(addr string, timeout time.Duration, g *rawio.Group) (net.Conn, error) {
	type dialed struct {
		conn net.Conn
		err  error
	}
	ch := make(chan dialed, 1)
	go func() {
		conn, err := fasthttp.DialTimeout(addr, timeout)
		ch <- dialed{conn, err}
	}()
	d := <-ch
	if d.err != nil {
		return nil, &ConnectError{Err: d.err}
	}
	// Its reads and writes do not wake the runtime's monitor thread (see
	// rawListener).
	return rawio.WrapIn(d.conn, g), nil
}

// dialH2 dials the upstream for HTTP/2, its reads and writes raw as on
// HTTP/1 (see rawListener).
func (p *Proxy) dialH2(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: p.timeout}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, &ConnectError{Err: err}
	}
	return rawio.WrapIn(c, &p.upstreams), nil
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
	clients *clientConns
}

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c = rawio.Wrap(c)
	l.clients.add(c)
	return c, nil
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

var _ io.Reader = (*exchange)(nil)
