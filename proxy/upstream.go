package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/peer"
	"github.com/loomgate/loomgate/internal/rawio"
)

// The exchange makes its own round trip on the HostClient's connection
// pool instead of calling HostClient.Do, for what Do cannot offer:
//   - it waits for the upstream's first bytes without a pooled 8 KiB
//     reader, so a request held at a slow upstream costs firstBytes, not
//     a reader (the pool's readers go only to answers that have arrived);
//   - it decides after the response's header whether to buffer the body
//     or stream it, so small bodies need no stream, no closures and no
//     copy between buffers (Do with StreamResponseBody streams every one);
//   - it reads the clock once for the whole trip: the deadline is
//     admission + UpstreamTimeout, which the exchange already knows, where
//     Do reads the clock five times to recompute it.
//
// Do's retries replay any request, which a proxy must not; it retries only
// where the upstream cannot have acted on one (see roundTrip). Do's user
// agent and redirect handling are disabled here anyway.

// firstBytes is what the exchange reads of an answer before it takes a
// reader from the pool: the whole of a typical small response, so that
// the pooled reader's first fill is served from it and costs no second
// read from the socket.
const firstBytes = 1 << 10

// maxInterim bounds the informational (1xx) responses read before the
// final one, as fasthttp does.
const maxInterim = 8

// errNoAnswer is an upstream connection that closed before answering; a
// kept-alive connection the upstream had just timed out looks like this.
var errNoAnswer = errors.New("proxy: upstream closed the connection before answering")

// errSeenClosed is a pooled connection found closed, reset or holding
// stray bytes by the look before a request is written on it: nothing was
// sent, so going on another spends no retry.
var errSeenClosed = errors.New("proxy: pooled upstream connection seen closed before writing")

// errUnaskedUpgrade is a 101 in answer to a request that asked for no
// upgrade (RFC 9110, 15.2.2: a server switches only to a protocol the
// request's Upgrade names).
var errUnaskedUpgrade = errors.New("proxy: upstream switched protocols unasked")

// pooledConn is what the exchange uses of fasthttp's pooled connection,
// whose type is unexported; giveBack names it by inference.
type pooledConn interface{ Conn() net.Conn }

var (
	keepConn = (*fasthttp.HostClient).ReleaseConn
	dropConn = (*fasthttp.HostClient).CloseConn
)

// giveBack hands cc to f, ReleaseConn or CloseConn: the type argument is
// fasthttp's connection type, which cannot be written here.
func giveBack[C pooledConn](hc *fasthttp.HostClient, f func(*fasthttp.HostClient, C), cc pooledConn) {
	f(hc, cc.(C))
}

// prefixReader serves the bytes already read from the connection, then
// the connection.
type prefixReader struct {
	b    []byte
	conn net.Conn
}

func (r *prefixReader) Read(p []byte) (int, error) {
	if len(r.b) > 0 {
		n := copy(p, r.b)
		r.b = r.b[n:]
		return n, nil
	}
	return r.conn.Read(p)
}

// firsts holds the buffers of first bytes. Pooled on their own, not part
// of the exchange: a request waiting in the queue has an exchange but no
// use for one.
var firsts = sync.Pool{New: func() any { return new([firstBytes]byte) }}

// upstreamConn is the upstream connection an exchange holds from its
// request's writing to its response's last byte.
type upstreamConn struct {
	cc    pooledConn
	br    *bufio.Reader
	first *[firstBytes]byte
	pre   prefixReader
	// reusable is set once the response has been read to its end on a
	// connection that stays open.
	reusable bool
}

// ConnectError is a failure to open a connection to the upstream: nothing
// listens at its address, or nothing answered the connect in time. The
// other failures (a connection reset, a malformed answer) come from an
// upstream that was reached.
type ConnectError struct {
	Err error
}

func (e *ConnectError) Error() string { return e.Err.Error() }

func (e *ConnectError) Unwrap() error { return e.Err }

// TimedOut reports whether the connect timed out, rather than failed at
// once (refused: nothing listens there; or no route to it): an upstream
// too busy to accept, or a host that drops packets.
func (e *ConnectError) TimedOut() bool {
	var ne net.Error
	return errors.Is(e.Err, fasthttp.ErrDialTimeout) || errors.As(e.Err, &ne) && ne.Timeout()
}

// roundTrip writes req upstream and reads the response's header into
// e.resp, leaving the body on the connection, which e holds until
// releaseUpstream.
//
// An upstream may close a kept-alive connection while it sits in the pool
// (its own idle timeout, a restart), and a request sent on it then meets
// the close: it was not the upstream's failure to answer, and the request
// goes out again on another connection. Only where the upstream cannot
// have acted on it: a pooled connection seen closed before anything was
// written (every pooled connection is looked at, a system call, for the
// bytes an upstream may send after an answer's end: see try), or one that
// ended with no byte of an answer under a request that is idempotent (RFC
// 9110, 9.2.2) and held whole: a close that comes after the look.
// Each retry spends a connection that had served before, so they end at
// the first fresh one. A request goes out again at most once: an upstream
// that reads a request and closes without answering it is failing on that
// request, not closing an idle connection, and would see it once per
// pooled connection. After that once, a pooled connection is looked at
// before anything is written, as for a request that may not be replayed.
// A connection the look finds closed is no retry: nothing went out on it,
// and an upstream that restarted leaves every pooled connection closed,
// one of which may close only after its look.
func (e *exchange) roundTrip(req *fasthttp.Request, deadline time.Time) error {
	replayable := isIdempotent(req) && !req.IsBodyStream()
	resent := false
	for {
		replay := replayable && !resent
		stale, err := e.try(req, deadline, replay)
		if !stale {
			return err
		}
		// Stale under a replay is a request that was written, unless the
		// look saw the connection closed before anything was.
		resent = resent || (replay && !errors.Is(err, errSeenClosed))
		e.p.log.Debug("upstream had closed a pooled connection; the request goes on another", "err", err)
		e.up.reusable = false
		e.releaseUpstream()
	}
}

// try is one round trip of roundTrip's; stale reports that the connection
// turned out closed by the upstream while idle, and req may go again.
// A reused connection is looked at before anything is written; stale
// then means nothing was. With replay, stale may also mean that req was
// written and may have been read, and the connection closed under it.
func (e *exchange) try(req *fasthttp.Request, deadline time.Time, replay bool) (stale bool, err error) {
	hc := e.p.client
	cc, err := hc.AcquireConn(e.p.timeout, false)
	if err != nil {
		return false, err
	}
	u := &e.up
	u.cc = cc
	conn := cc.Conn()
	reused := wasUsed(conn)
	if reused && !peer.Quiet(conn) {
		// Closed or reset while idle, or sent bytes that answer no
		// request: the next request would read them as its answer (a
		// 204 with a body, say, whose body comes after the answer was
		// done). Either way it goes on another connection.
		return true, errSeenClosed
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return false, err
	}
	// As HostClient.Do does: the target goes out as it came in.
	req.URI().DisablePathNormalizing = true
	// The request is held in the exchange's scratch space until written,
	// and the writer's buffer goes back to its pool before the wait for
	// the answer: a request held at the upstream keeps only its own bytes.
	w := requestWriters.Get().(*requestWriter)
	w.reset(conn, req.IsBodyStream(), e.scratch[:0])
	err = req.Write(w.bw)
	if err == nil {
		err = w.bw.Flush()
	}
	held, direct := w.held, w.direct
	w.release()
	e.scratch = held[:0]
	u.first = firsts.Get().(*[firstBytes]byte)
	var n int
	switch {
	case err == nil:
		n, err = writeRead(conn, held, direct, u.first[:])
	case direct && closedUnder(err) && !errors.Is(err, errClientBody):
		// An upstream may answer before it has read the body (a 401, a
		// 413: RFC 9112, 9.3) and close with the rest unread, which
		// resets the connection under the body's writing. Its answer came
		// first, and is the request's, if it is there to read: a closed
		// connection's read does not wait.
		if n, _ = conn.Read(u.first[:]); n > 0 {
			err = nil
			e.unsent = true
			break
		}
		fallthrough
	default:
		// A request longer than the writer holds goes out in more than
		// one write, and the first can land on a connection the upstream
		// had closed: the close comes back under the second.
		return reused && replay && closedUnder(err), err
	}
	if n == 0 {
		if err == nil || err == io.EOF {
			err = errNoAnswer
		}
		return reused && replay && closedUnder(err), err
	}
	u.pre = prefixReader{b: u.first[:n], conn: conn}
	u.br = hc.AcquireReader(conn)
	u.br.Reset(&u.pre)

	resp := &e.resp
	resp.SkipBody = req.Header.IsHead()
	for i := 0; ; i++ {
		if err := resp.Header.Read(u.br); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return false, err
		}
		status := resp.StatusCode()
		if status == fasthttp.StatusSwitchingProtocols {
			// This request asked for no upgrade (one that did goes by
			// upgrade, not here): the connection now speaks something the
			// client never asked for, and would wait on it for ever.
			return false, errUnaskedUpgrade
		}
		if status < 100 || status > 199 {
			return false, nil
		}
		if i == maxInterim {
			return false, errors.New("proxy: too many informational responses")
		}
	}
}

// wasUsed reports whether conn had carried a request before: only such a
// connection can have been closed by the upstream as it sat in the pool.
func wasUsed(conn net.Conn) bool {
	u, ok := conn.(interface{ Used() bool })
	return ok && u.Used()
}

// closedUnder reports whether err, with no byte of an answer read, is the
// upstream's close or reset of the connection, not a timeout.
func closedUnder(err error) bool {
	return errors.Is(err, errNoAnswer) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isIdempotent reports whether req's method is idempotent (RFC 9110,
// 9.2.2): sent twice, it does what it does once, so a request the upstream
// may have seen before it closed can go again. A request with an
// Idempotency-Key says the same of itself.
func isIdempotent(req *fasthttp.Request) bool {
	switch string(req.Header.Method()) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace, fasthttp.MethodPut, fasthttp.MethodDelete:
		return true
	}
	return len(req.Header.Peek("Idempotency-Key")) > 0
}

// heldBytes is the most of a request requestWriter holds back: the line,
// the headers and a small body read whole before the handler. A larger
// request goes out as it is written, and its answer is read as any read.
const heldBytes = 4 << 10

// requestWriter holds a request's bytes until it is written whole, so that
// writing it and reading the answer's first bytes are one call (rawio's
// WriteRead), which saves a read that would find nothing. A request whose
// body streams from the client goes out as it is written: its first part
// must not wait for the rest.
type requestWriter struct {
	conn   net.Conn
	held   []byte
	direct bool
	bw     *bufio.Writer
}

var requestWriters = sync.Pool{New: func() any {
	w := new(requestWriter)
	w.bw = bufio.NewWriterSize(w, 4<<10)
	return w
}}

// reset readies w to write to conn, holding the request in held's space
// unless direct.
func (w *requestWriter) reset(conn net.Conn, direct bool, held []byte) {
	w.conn, w.direct, w.held = conn, direct, held
	w.bw.Reset(w)
}

func (w *requestWriter) Write(p []byte) (int, error) {
	if !w.direct && len(w.held)+len(p) <= heldBytes {
		w.held = append(w.held, p...)
		return len(p), nil
	}
	if err := w.goDirect(); err != nil {
		return 0, err
	}
	return w.conn.Write(p)
}

// ReadFrom hands a streamed body to the connection's own ReadFrom, which
// writes each piece as it arrives: bufio.Writer's would hold the last
// piece of what the client sent so far until its buffer filled.
func (w *requestWriter) ReadFrom(r io.Reader) (int64, error) {
	if err := w.goDirect(); err != nil {
		return 0, err
	}
	if rf, ok := w.conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{w.conn}, r)
}

// goDirect writes what is held and makes every later write go out at once.
func (w *requestWriter) goDirect() error {
	if w.direct {
		return nil
	}
	w.direct = true
	if len(w.held) == 0 {
		return nil
	}
	_, err := w.conn.Write(w.held)
	w.held = w.held[:0]
	return err
}

// release returns w to its pool, without the held space, which is the
// exchange's.
func (w *requestWriter) release() {
	w.conn, w.held = nil, nil
	requestWriters.Put(w)
}

// writeReader is rawio's connection, on Linux.
type writeReader interface {
	WriteRead(w, r []byte) (int, error)
}

// writeRead writes held, the request (unless it went out directly), and
// reads the answer's first bytes into b.
func writeRead(conn net.Conn, held []byte, direct bool, b []byte) (int, error) {
	if !direct && len(held) > 0 {
		if wr, ok := conn.(writeReader); ok {
			return wr.WriteRead(held, b)
		}
		if _, err := conn.Write(held); err != nil {
			return 0, err
		}
	}
	return conn.Read(b)
}

// hasBody reports whether the response read by roundTrip has a body to
// read: not for HEAD, 1xx, 204 or 304.
func (e *exchange) hasBody() bool {
	s := e.resp.StatusCode()
	return !e.resp.SkipBody && s >= 200 && s != fasthttp.StatusNoContent && s != fasthttp.StatusNotModified
}

// readBody reads a body of known length whole into e.resp and gives the
// connection back.
func (e *exchange) readBody() error {
	e.resp.StreamBody = false
	if err := e.resp.ReadBody(e.up.br, 0); err != nil {
		return err
	}
	e.up.reusable = true
	e.releaseUpstream()
	return nil
}

// streamBody makes e.resp's body a stream from the connection, which stays
// held until the stream ends and releaseUpstream runs.
func (e *exchange) streamBody() io.Reader {
	e.resp.StreamBody = true
	// ReadBody only sets the stream up when StreamBody is set: it cannot
	// fail.
	_ = e.resp.ReadBody(e.up.br, 0)
	return e.resp.BodyStream()
}

// releaseUpstream gives the upstream connection back to the pool when its
// response was read to its end and it stays open, and closes it otherwise.
func (e *exchange) releaseUpstream() {
	u := &e.up
	if u.cc == nil {
		return
	}
	_ = e.resp.CloseBodyStream()
	// Bytes read past the answer's end answer no request: the upstream
	// lost the connection's framing. (And one whose writing failed under
	// an early answer is broken.)
	framed := len(u.pre.b) == 0 && (u.br == nil || u.br.Buffered() == 0)
	hc := e.p.client
	if u.br != nil {
		hc.ReleaseReader(u.br)
	}
	// fasthttp marks a body read to the connection's close (neither
	// length nor chunked) as closing it.
	if u.reusable && framed && !e.unsent && !e.resp.ConnectionClose() {
		giveBack(hc, keepConn, u.cc)
	} else {
		giveBack(hc, dropConn, u.cc)
	}
	if u.first != nil {
		firsts.Put(u.first)
	}
	u.cc, u.br, u.first, u.reusable = nil, nil, nil, false
	u.pre = prefixReader{}
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
