package h2c

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/internal/outcome"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// outcomeHeader is admission.OutcomeHeader as HTTP/2 writes it.
var outcomeHeader = strings.ToLower(admission.OutcomeHeader)

// Where a stream is on its way through admission.
const (
	// pending: read, to be admitted once its batch of frames is read.
	pending = iota
	// waiting for admission, on a goroutine of its own.
	waiting
	// admitted, or refused and being answered.
	admitted
)

// stream is one HTTP/2 request's state, and admission's Client while it
// waits. Its conn's mu guards it, but for upWin, which its upstream
// connection's does.
type stream struct {
	c     *conn
	id    uint32
	req   admission.Request
	grpc  bool
	state int
	// fields are the request's header fields, as decoded.
	fields    []hpack.HeaderField
	authority string
	// declared is the body's content-length, -1 if none.
	declared int64

	// The request's way up: what the client sent and the upstream's
	// windows have not yet let through (up.queued is u.mu's). recvWin
	// is what the client may still send, reqGot all it sent.
	up      flow
	recvWin int32
	reqGot  int64
	// clientCredit is what was forwarded and not yet given back to the
	// client's window.
	clientCredit uint32

	// The upstream's stream: u and upID once opened, upWin the upstream's
	// window for it (u.mu), upEnd once its last frame came.
	u     *uconn
	upID  uint32
	upWin int32
	upEnd bool
	// upForwarded is what went upstream of the body; retried is set
	// once the stream was opened again (see retry), blindRetries counts
	// the times it was refused by a connection whose limit was not yet
	// known when it was opened there (upBlind).
	upForwarded  int64
	upload       bool
	retried      bool
	upBlind      bool
	blindRetries int

	// The response's way down: what waits for the client's windows.
	// sendWin is the client's window for the stream; unsent what was
	// appended to the client's output and not yet written.
	down    flow
	sendWin int32
	unsent  int32
	// upCredit is what was written to the client and not yet given back
	// to the upstream's window.
	upCredit uint32
	// headersSent is set once the response's headers, the upstream's or
	// the proxy's own answer, went to the client.
	headersSent bool
	headersAt   time.Time

	// wait is the context of a wait for admission, cancel its end.
	wait   context.Context
	cancel context.CancelFunc
	// gone is set when the client left while the stream waited.
	gone bool
	// timer bounds the exchange (UpstreamTimeout, the call's deadline);
	// bodyTimer each pause in a plain request's body (BodyTimeout).
	timer, bodyTimer *time.Timer
	// expired is set when the call's own deadline (grpc-timeout) passed.
	expired bool
	// malformed is set for a request answered 400 for its header block,
	// and reset once answered.
	malformed bool
	done      bool
	// endAt is when the stream ended, for its record.
	endAt time.Time
}

// newStream reads a stream's header block. A malformed one (RFC 9113,
// 8.1.1, 8.2.1, 8.3.1) is never forwarded: it is answered 400 and counted, as on
// HTTP/1.1, then reset with PROTOCOL_ERROR, as the RFC asks.
func newStream(c *conn, id uint32, f *http2.MetaHeadersFrame) *stream {
	st := &stream{c: c, id: id, declared: -1, recvWin: StreamReceiveWindow, sendWin: c.initWin}
	st.req.Begin(time.Now())
	st.up.end = f.StreamEnded()
	if a, ok := c.remote.(*net.TCPAddr); ok {
		st.req.Record.Remote = a
	} else {
		st.req.Record.Remote = c.remote
	}
	st.malformed = !st.read(f)
	return st
}

// read reads the stream's header block, and reports whether it is well
// formed.
func (st *stream) read(f *http2.MetaHeadersFrame) bool {
	var method, path, scheme, host string
	var nMethod, nPath, nScheme, nAuthority, nHost int
	var timeout string
	bad := false
	for _, hf := range f.Fields {
		if v := hf.Value; v != "" && (isSpace(v[0]) || isSpace(v[len(v)-1])) {
			// Whitespace at either end of a value (8.2.1): what one
			// reader trims another keeps.
			bad = true
		}
		switch hf.Name {
		case ":method":
			method, nMethod = hf.Value, nMethod+1
		case ":path":
			path, nPath = hf.Value, nPath+1
		case ":scheme":
			scheme, nScheme = hf.Value, nScheme+1
		case ":authority":
			st.authority, nAuthority = hf.Value, nAuthority+1
		case ":status", ":protocol":
			bad = true
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			// Connection-specific fields have no place in HTTP/2.
			bad = true
		case "te":
			if hf.Value != "trailers" {
				bad = true
			}
		case "content-length":
			n, err := strconv.ParseInt(hf.Value, 10, 64)
			if err != nil || n < 0 || st.declared >= 0 && st.declared != n {
				bad = true
			}
			st.declared = n
		case "content-type":
			st.grpc = isGRPC(hf.Value)
		case "grpc-timeout":
			timeout = hf.Value
		case "host":
			host, nHost = hf.Value, nHost+1
			if nAuthority == 0 {
				st.authority = hf.Value
			}
		}
	}
	o := &st.req.Record
	o.Method, o.Target = []byte(method), []byte(path)
	if bad || nMethod != 1 || nPath != 1 || nScheme != 1 || nAuthority > 1 || nHost > 1 || scheme == "" || method == "CONNECT" {
		return false
	}
	// What the upstream would read otherwise than the proxy did: a
	// method that is no token, a path that is no origin-form (a space
	// splits a request line, an absolute URI names another host), an
	// authority with userinfo (8.3.1) or that the host contradicts.
	if !httpguts.ValidHeaderFieldName(method) || !validPath(method, path) ||
		(nAuthority+nHost > 0 && !validAuthority(st.authority)) ||
		(nAuthority == 1 && nHost == 1 && !strings.EqualFold(host, st.authority)) {
		return false
	}
	if st.up.end && st.declared > 0 {
		return false
	}
	// The Framer decodes each header block into fields of its own: the
	// stream keeps them, as it keeps its trailers' (see conn.onHeaders).
	st.fields = f.Fields
	st.req.Length = int(st.declared)
	if st.up.end {
		// No body at all: nothing to reserve for one.
		st.req.Length = 0
	}
	if st.grpc {
		if d, ok := ParseGRPCTimeout(timeout); ok {
			st.req.Deadline = st.req.Start.Add(d)
		}
	}
	return true
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' }

// validPath reports whether a request's :path is one the upstream reads
// as the proxy does: a path, and its query, of visible characters, or
// "*" for OPTIONS (RFC 9113, 8.3.1).
func validPath(method, path string) bool {
	if path == "*" {
		return method == "OPTIONS"
	}
	if path == "" || path[0] != '/' {
		return false
	}
	for i := 0; i < len(path); i++ {
		if b := path[i]; b <= ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

// validAuthority reports whether an :authority (or host) is a host and
// port alone: no userinfo, which RFC 9113 (8.3.1) forbids, and nothing a
// host header may not hold.
func validAuthority(a string) bool {
	return a != "" && !strings.Contains(a, "@") && httpguts.ValidHostHeader(a)
}

func isGRPC(contentType string) bool {
	return strings.HasPrefix(contentType, "application/grpc")
}

// Watch is the wait's context: it ends when the client resets the stream
// or leaves, or the call's own deadline passes.
func (st *stream) Watch() (context.Context, func()) {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.wait, func() {}
}

// Left reports whether the stream ended while it waited: a permit handed
// over as it was cancelled would send the upstream a request nobody
// reads.
func (st *stream) Left(ctx context.Context) bool { return ctx.Err() != nil }

// Header is the stream's header field name.
func (st *stream) Header(name string) []byte {
	for _, hf := range st.fields {
		if len(hf.Name) == len(name) && strings.EqualFold(hf.Name, name) {
			return []byte(hf.Value)
		}
	}
	return nil
}

// callExpired says whether the gRPC call's own deadline has passed.
func (st *stream) callExpired() bool {
	return !st.req.Deadline.IsZero() && !time.Now().Before(st.req.Deadline)
}

// admit takes the stream through admission: at once, or on a goroutine
// that waits.
func (st *stream) admit(b *batch) {
	c := st.c
	c.mu.Lock()
	if st.done {
		c.mu.Unlock()
		return
	}
	if st.declared > c.s.cfg.MaxBodyBytes {
		st.answerAs(outcome.BadRequest, b)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	ok, wait := c.s.gate.TryAdmit(&st.req, st)
	c.mu.Lock()
	defer c.mu.Unlock()
	if wait {
		st.state = waiting
		if st.req.Deadline.IsZero() {
			st.wait, st.cancel = context.WithCancel(context.Background())
		} else {
			st.wait, st.cancel = context.WithDeadline(context.Background(), st.req.Deadline)
		}
		go st.await()
		return
	}
	st.state = admitted
	if ok {
		st.start(b)
	} else {
		st.refused(b)
	}
}

// await waits for the stream's admission.
func (st *stream) await() {
	ok := st.c.s.gate.Await(&st.req, st)
	var b batch
	c := st.c
	c.mu.Lock()
	st.cancel()
	st.state = admitted
	switch {
	case ok && st.gone:
		st.req.Record.Kind, st.req.Record.Status = outcome.ClientClosed, outcome.StatusClientClosed
		st.end(&b)
	case ok:
		st.start(&b)
	default:
		st.refused(&b)
	}
	c.mu.Unlock()
	b.kick()
}

// start sends an admitted stream upstream; c.mu held.
func (st *stream) start(b *batch) {
	held(&st.c.mu)
	cfg := &st.c.s.cfg
	// UpstreamTimeout bounds what the permit is held for: the whole
	// exchange, or a gRPC call's wait for its headers; the call's own
	// deadline bounds the call.
	d := cfg.UpstreamTimeout - time.Since(st.req.AdmittedAt)
	if !st.req.Deadline.IsZero() {
		d = min(d, time.Until(st.req.Deadline))
	}
	st.timer = time.AfterFunc(d, st.fire)
	if !st.grpc && !st.up.end {
		// Each pause in a plain request's body is bounded as on
		// HTTP/1.1: a client that stops sending would hold its permit
		// until UpstreamTimeout, and be blamed on the upstream. Not a
		// gRPC call's: a client stream may be quiet between messages for
		// as long as the call lives.
		st.bodyTimer = time.AfterFunc(cfg.BodyTimeout, st.bodyIdle)
	}
	st.c.s.pool.open(st, b)
}

// upstreamFields are the request's header fields as they go upstream.
func (st *stream) upstreamFields() []hpack.HeaderField {
	fields := make([]hpack.HeaderField, 0, len(st.fields)+4)
	xff := ""
	for _, hf := range st.fields {
		switch hf.Name {
		case ":scheme":
			hf.Value = "http"
		case "x-forwarded-for":
			if xff != "" {
				xff += ", "
			}
			xff += hf.Value
			continue
		case "x-forwarded-host", "x-forwarded-proto", "forwarded":
			continue
		case "grpc-timeout":
			if !st.req.Deadline.IsZero() {
				continue
			}
		}
		fields = append(fields, hf)
	}
	if a, ok := st.c.remote.(*net.TCPAddr); ok {
		if xff != "" {
			xff += ", "
		}
		xff += a.IP.String()
	}
	if xff != "" {
		fields = append(fields, hpack.HeaderField{Name: "x-forwarded-for", Value: xff})
	}
	if st.authority != "" {
		fields = append(fields, hpack.HeaderField{Name: "x-forwarded-host", Value: st.authority})
	}
	fields = append(fields, hpack.HeaderField{Name: "x-forwarded-proto", Value: "http"})
	if !st.req.Deadline.IsZero() {
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: grpcTimeout(time.Until(st.req.Deadline))})
	}
	return fields
}

// body takes what the client sent of the body; c.mu held.
func (st *stream) body(data []byte, end bool, b *batch) {
	held(&st.c.mu)
	st.reqGot += int64(len(data))
	cfg := &st.c.s.cfg
	if st.declared >= 0 && (st.reqGot > st.declared || end && st.reqGot != st.declared) {
		st.protocolError(http2.ErrCodeProtocol, b)
		return
	}
	if st.reqGot > cfg.MaxBodyBytes {
		// A body of unknown length is cut at the limit: the upstream
		// sees the stream reset, the client a 413.
		st.answerAs(outcome.BadRequest, b)
		return
	}
	if st.bodyTimer != nil && !end {
		st.bodyTimer.Reset(cfg.BodyTimeout)
	}
	if st.headersSent && st.u == nil {
		// Answered by the proxy: the body goes nowhere.
		st.credit(uint32(len(data)))
		b.mark(st.c.out)
	} else if len(st.up.buf) == 0 {
		// Forwarded straight from the frame where the windows let it;
		// only the rest is copied.
		st.up.buf = data
		st.pushUp(b)
		if len(st.up.buf) > 0 {
			// As large as it must be: a gRPC call's message, which comes
			// before its admission, is mostly small.
			st.up.buf = bytes.Clone(st.up.buf)
		}
	} else {
		st.up.buf = append(st.up.buf, data...)
	}
	if end {
		st.endOfBody(b)
	}
}

// endOfBody is the request's end; c.mu held.
func (st *stream) endOfBody(b *batch) {
	held(&st.c.mu)
	st.up.end = true
	if st.bodyTimer != nil {
		st.bodyTimer.Stop()
	}
	if st.headersSent && st.u == nil {
		if st.down.fin && !st.done {
			st.end(b)
		}
		return
	}
	st.pushUp(b)
}

// credit gives the client back n bytes of the stream's window; c.mu
// held.
//
// Bytes go back in halves of the window, as Go's own HTTP/2 does: a
// WINDOW_UPDATE for each DATA frame forwarded cost a frame, and a lock
// round, per message of every call, while the window left the client
// never lacked room.
func (st *stream) credit(n uint32) {
	held(&st.c.mu)
	if st.up.end || st.done {
		return
	}
	if st.clientCredit += n; st.clientCredit < StreamReceiveWindow/2 {
		return
	}
	st.recvWin += int32(st.clientCredit)
	st.c.out.mu.Lock()
	st.c.out.windowUpdate(st.id, st.clientCredit)
	st.c.out.mu.Unlock()
	st.clientCredit = 0
}

// flow is one way of a stream's bytes: what came from one side and waits
// for the other side's windows, and the way's end.
type flow struct {
	buf []byte
	// end is set once the sender's last frame came; trailers, if it
	// ended with them.
	end      bool
	trailers []hpack.HeaderField
	// fin is set once the end went out.
	fin bool
	// queued is set while the stream waits in its connection's list of
	// streams held up by the connection's window: once at most.
	queued bool
}

// drain appends to o, for stream id, the DATA of f that the stream's
// window (win) and the connection's (connWin) let through, and f's end
// once all is out; o is told of each frame's bytes and of the end as w
// says. It returns the bytes sent, and whether the connection's window
// held back some of them. o.mu held.
func (f *flow) drain(o *out, id uint32, win, connWin *int32, w written) (sent int32, heldBack bool) {
	held(&o.mu)
	for len(f.buf) > 0 {
		n := min(int32(len(f.buf)), *win, *connWin)
		if n <= 0 {
			return sent, *connWin <= 0 && *win > 0
		}
		end := int(n) == len(f.buf) && f.end && f.trailers == nil
		o.data(id, f.buf[:n], end)
		w.n, w.end = n, end
		o.note(w)
		sent += n
		*win -= n
		*connWin -= n
		f.buf = f.buf[n:]
		f.fin = end
	}
	f.buf = nil
	if f.end && !f.fin {
		if f.trailers != nil {
			o.headers(id, f.trailers, true)
		} else {
			o.data(id, nil, true)
		}
		w.n, w.end = 0, true
		o.note(w)
		f.fin = true
	}
	return sent, false
}

// pushUp sends upstream what the upstream's windows let it of the body,
// and the body's end; c.mu held.
func (st *stream) pushUp(b *batch) {
	held(&st.c.mu)
	u := st.u
	if u == nil || st.up.fin || st.done {
		return
	}
	u.mu.Lock()
	u.out.mu.Lock()
	sent, held := st.up.drain(u.out, st.upID, &st.upWin, &u.sendWin, written{s: st})
	st.upForwarded += int64(sent)
	if held && !st.up.queued {
		st.up.queued = true
		u.blocked = append(u.blocked, st)
	}
	u.out.mu.Unlock()
	u.mu.Unlock()
	b.mark(u.out)
}

// pushDown sends the client what its windows let it of the response, and
// the response's end; c.mu held.
func (st *stream) pushDown(b *batch) {
	held(&st.c.mu)
	c := st.c
	if st.done || st.down.fin {
		return
	}
	c.out.mu.Lock()
	sent, held := st.down.drain(c.out, st.id, &st.sendWin, &c.sendWin, written{s: st, toClient: true})
	st.unsent += sent
	c.out.mu.Unlock()
	if sent > 0 {
		// A client's PING may measure what it receives, as a gRPC
		// client's estimate of the bandwidth-delay product does.
		c.busyFrame()
	}
	if held && !st.down.queued {
		st.down.queued = true
		c.blocked = append(c.blocked, st)
	}
	if len(st.down.buf) > 0 {
		c.watchStall()
	}
	b.mark(c.out)
}

// sent is told of what a write did for the stream: the window of the
// bytes it forwarded goes back to their sender, and the response's end,
// once written, ends the stream.
func (st *stream) sent(w written, b *batch) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.toClient {
		st.unsent -= w.n
		st.upCredit += uint32(max(w.n, 0))
		if u := st.u; u != nil && st.upCredit >= upstreamStreamBuffer/2 && !st.upEnd {
			// In halves of the window, as the client's (see credit).
			u.out.mu.Lock()
			u.out.windowUpdate(st.upID, st.upCredit)
			u.out.mu.Unlock()
			st.upCredit = 0
			b.mark(u.out)
		}
	} else if w.n > 0 {
		st.credit(uint32(w.n))
		b.mark(c.out)
	}
	if w.end && w.toClient && !st.done {
		if st.malformed || !st.up.end {
			// The response is whole and the client still sends: it
			// may stop (RFC 9113, 8.1). A malformed request is a stream
			// error besides (8.1.1).
			code := http2.ErrCodeNo
			if st.malformed {
				code = http2.ErrCodeProtocol
			}
			st.rstClient(code, b)
		}
		st.end(b)
	}
}

// respHeaders relays the upstream's response headers, or its trailers;
// c.mu held.
func (st *stream) respHeaders(f *http2.MetaHeadersFrame, b *batch) {
	held(&st.c.mu)
	c := st.c
	if st.done {
		return
	}
	if f.Truncated {
		st.upFailed(errUpstreamProtocol, b)
		return
	}
	if st.headersSent {
		if st.down.end || !f.StreamEnded() {
			st.upFailed(errUpstreamProtocol, b)
			return
		}
		st.down.trailers = f.Fields
		st.down.end, st.upEnd = true, true
		st.pushDown(b)
		return
	}
	status := f.PseudoValue("status")
	code, err := strconv.Atoi(status)
	if err != nil || code < 100 || code > 999 || code == 101 {
		st.upFailed(errUpstreamProtocol, b)
		return
	}
	fields := f.Fields
	if code < 200 {
		// An interim response goes as it came.
		c.out.mu.Lock()
		c.out.headers(st.id, fields, false)
		c.out.mu.Unlock()
		b.mark(c.out)
		return
	}
	now := time.Now()
	st.headersAt = now
	o := &st.req.Record
	o.UpstreamStatus, o.Status = code, code
	if st.grpc {
		st.timer.Stop()
		// The rest of a gRPC stream holds no worker, but it holds its
		// buffers, and without its reservation the streams a connection
		// may open could hold memory that the memory bulkhead never saw.
		c.s.gate.ReleasePermit(&st.req, now)
	}
	if c.s.cfg.ServerTiming {
		fields = append(fields[:len(fields):len(fields)], hpack.HeaderField{Name: "server-timing", Value: string(st.req.AppendServerTiming(nil, now))})
	}
	st.headersSent = true
	c.answered()
	end := f.StreamEnded()
	c.out.mu.Lock()
	c.out.headers(st.id, fields, end)
	if end {
		c.out.note(written{s: st, toClient: true, end: true})
	}
	c.out.mu.Unlock()
	if end {
		st.down.end, st.upEnd, st.down.fin = true, true, true
	}
	b.mark(c.out)
}

// respData relays the upstream's DATA; c.mu held.
func (st *stream) respData(data []byte, end bool, b *batch) {
	held(&st.c.mu)
	if st.done || !st.headersSent || st.down.end {
		return
	}
	st.down.end = end
	st.upEnd = end
	if len(st.down.buf) == 0 {
		st.down.buf = data
		st.pushDown(b)
		if len(st.down.buf) > 0 {
			st.down.buf = bytes.Clone(st.down.buf)
		}
		return
	}
	st.down.buf = append(st.down.buf, data...)
}

// refused answers a stream admission refused, as its Outcome's kind says;
// c.mu held.
func (st *stream) refused(b *batch) {
	held(&st.c.mu)
	switch kind := st.req.Record.Kind; {
	case st.req.Expired():
		// The call's own deadline passed in the queue. The client's own
		// timer says DEADLINE_EXCEEDED; whichever it hears first, ours
		// must say the same.
		st.expired = true
		st.answer(outcome.ClientClosed, 0, "deadline exceeded while queued\n", b)
		st.req.Record.Status = outcome.StatusClientClosed
	case kind == outcome.ClientClosed:
		// Reset by its client, or its connection gone: nobody to answer.
		st.end(b)
	default:
		st.answerAs(kind, b)
	}
}

// answerAs writes the proxy's own answer to kind, as every protocol gives
// it (see admission.Gate.Answer); c.mu held.
func (st *stream) answerAs(kind outcome.Kind, b *batch) {
	held(&st.c.mu)
	status, msg, _ := st.c.s.gate.Answer(kind)
	st.answer(kind, status, msg, b)
}

// answer writes the proxy's own answer: for gRPC a trailers-only response
// with grpc-status (a gRPC client ignores the HTTP status), otherwise the
// plain-text answer HTTP/1.1 gets. Both carry Loomgate-Outcome, and a
// rejection Retry-After. Whatever the upstream had of the stream is
// reset. c.mu held.
//
// A plain answer's body waits for the client's flow-control window, which
// a client may never grant: while it waits, the stream reserves
// AnswerBytes, as a request does, and UpstreamTimeout bounds the wait, as
// it bounds a response's; without room in the memory bulkhead it goes
// without its body. A gRPC answer is headers alone, which no window holds
// up.
func (st *stream) answer(kind outcome.Kind, status int, msg string, b *batch) {
	held(&st.c.mu)
	c := st.c
	h := c.s
	if st.done {
		return
	}
	if st.headersSent {
		// Too late for an answer: the stream is reset.
		st.req.Record.Kind = kind
		st.rstClient(http2.ErrCodeInternal, b)
		st.end(b)
		return
	}
	st.dropUp(b)
	if st.state == pending {
		st.state = admitted
	}
	o := &st.req.Record
	o.Kind = kind
	st.headersSent = true
	fields := make([]hpack.HeaderField, 0, 8)
	fields = append(fields, hpack.HeaderField{Name: ":status", Value: "200"})
	if kind.Rejection() {
		var retryAfter int64
		status, _, retryAfter = h.gate.Answer(kind)
		fields = append(fields, hpack.HeaderField{Name: "retry-after", Value: strconv.FormatInt(retryAfter, 10)})
	}
	fields = append(fields, hpack.HeaderField{Name: outcomeHeader, Value: kind.String()})
	if h.cfg.ServerTiming {
		fields = append(fields, hpack.HeaderField{Name: "server-timing", Value: string(st.req.AppendServerTiming(nil, time.Now()))})
	}
	msg = strings.TrimSuffix(msg, "\n")
	if st.grpc {
		code := grpcCode(kind)
		if st.expired {
			code = grpcDeadlineExceeded
		}
		fields = append(fields,
			hpack.HeaderField{Name: "content-type", Value: "application/grpc"},
			hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(code)},
			hpack.HeaderField{Name: "grpc-message", Value: msg})
		o.Status = 200
		c.out.mu.Lock()
		c.out.headers(st.id, fields, true)
		c.out.note(written{s: st, toClient: true, end: true})
		c.out.mu.Unlock()
		st.down.end, st.down.fin = true, true
		b.mark(c.out)
		return
	}
	fields[0].Value = strconv.Itoa(status)
	o.Status = status
	body := msg + "\n"
	if !h.gate.ReserveAnswer(&st.req, h.cfg.AnswerBytes) {
		body = ""
	}
	fields = append(fields,
		hpack.HeaderField{Name: "content-type", Value: admission.TextPlain},
		hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	c.out.mu.Lock()
	c.out.headers(st.id, fields, body == "")
	if body == "" {
		c.out.note(written{s: st, toClient: true, end: true})
	}
	c.out.mu.Unlock()
	b.mark(c.out)
	if body == "" {
		st.down.end, st.down.fin = true, true
		return
	}
	st.down.buf, st.down.end = []byte(body), true
	if st.timer == nil {
		st.timer = time.AfterFunc(h.cfg.UpstreamTimeout, st.fire)
	} else {
		st.timer.Reset(h.cfg.UpstreamTimeout)
	}
	st.pushDown(b)
}

// fire is the stream's timer: UpstreamTimeout, or the call's own
// deadline.
func (st *stream) fire() {
	c := st.c
	var b batch
	c.mu.Lock()
	defer b.kick()
	defer c.mu.Unlock()
	if st.done || st.state != admitted {
		return
	}
	if !st.headersSent {
		switch {
		case st.callExpired():
			// The call's own deadline, not UpstreamTimeout: the client
			// chose to wait no longer, and its status is
			// DEADLINE_EXCEEDED, which its own timer also says.
			st.expired = true
			st.answer(outcome.ClientClosed, 0, "deadline exceeded\n", &b)
			st.req.Record.Status = outcome.StatusClientClosed
		case st.waitsForClient():
			st.answerAs(outcome.ClientTimeout, &b)
		default:
			st.answerAs(outcome.UpstreamTimeout, &b)
		}
		return
	}
	// Under way: whoever it waits for is at fault. A client that does
	// not take its response (it grants no window) is client_timeout.
	o := &st.req.Record
	switch {
	case o.Kind != outcome.OK:
	case st.unsent > 0 || len(st.down.buf) > 0 || st.waitsForClient():
		o.Kind = outcome.ClientTimeout
	default:
		o.Kind = outcome.UpstreamTimeout
	}
	st.rstClient(http2.ErrCodeCancel, &b)
	st.end(&b)
}

// rstClient resets the stream on the client's side; c.mu held.
func (st *stream) rstClient(code http2.ErrCode, b *batch) {
	held(&st.c.mu)
	c := st.c
	c.out.mu.Lock()
	c.out.rst(st.id, code)
	c.out.mu.Unlock()
	b.mark(c.out)
}

// waitsForClient reports whether the stream waits for its client's body;
// c.mu held.
func (st *stream) waitsForClient() bool {
	held(&st.c.mu)
	return !st.up.end && len(st.up.buf) == 0 && !st.grpc
}

// bodyIdle is a plain request's body paused past BodyTimeout.
func (st *stream) bodyIdle() {
	c := st.c
	var b batch
	c.mu.Lock()
	defer b.kick()
	defer c.mu.Unlock()
	if st.done || st.up.end || st.state != admitted {
		return
	}
	if !st.headersSent {
		st.answerAs(outcome.ClientTimeout, &b)
		return
	}
	st.req.Record.Kind = outcome.ClientTimeout
	st.rstClient(http2.ErrCodeCancel, &b)
	st.end(&b)
}

// clientReset is the client's RST_STREAM; c.mu held.
func (st *stream) clientReset(b *batch) {
	held(&st.c.mu)
	st.up.end = true
	switch st.state {
	case pending:
		// Reset before it met admission: never forwarded, and kept out
		// of what admission and the advice measure.
		st.req.Record.Kind, st.req.Record.Status = outcome.ClientReset, outcome.StatusClientClosed
		st.end(b)
	case waiting:
		st.gone = true
		st.cancel()
	default:
		if st.req.Record.Kind == outcome.OK {
			st.req.Record.Kind, st.req.Record.Status = outcome.ClientClosed, outcome.StatusClientClosed
		}
		st.end(b)
	}
}

// connGone is the client connection's end; c.mu held.
func (st *stream) connGone(kind outcome.Kind, b *batch) {
	held(&st.c.mu)
	switch st.state {
	case waiting:
		st.gone = true
		st.cancel()
		return
	case pending:
		st.req.Record.Kind, st.req.Record.Status = outcome.ClientReset, outcome.StatusClientClosed
	default:
		if st.req.Record.Kind == outcome.OK {
			st.req.Record.Kind = kind
			if kind == outcome.ClientClosed || !st.headersSent {
				st.req.Record.Status = outcome.StatusClientClosed
			}
		}
	}
	st.end(b)
}

// protocolError resets a stream for its client's breach of HTTP/2, and
// counts it a bad request; c.mu held, by the reader.
//
// A stream reset before its answer is charged to the client's budget of
// premature resets, protocolResetCost of it: the client chose the reset
// as surely as with a RST_STREAM of its own, and the upstream's work on
// it is as lost (MadeYouReset, CVE-2025-8671).
func (st *stream) protocolError(code http2.ErrCode, b *batch) {
	held(&st.c.mu)
	if !st.headersSent {
		st.c.chargeReset(protocolResetCost)
	}
	st.rstClient(code, b)
	st.up.end = true
	if st.state == waiting {
		st.gone = true
		st.cancel()
		return
	}
	if st.req.Record.Kind == outcome.OK {
		st.req.Record.Kind, st.req.Record.Status = outcome.BadRequest, 400
		if st.state == pending {
			st.req.Record.Kind = outcome.ClientReset
		}
	}
	st.end(b)
}

// upFailed is the upstream's failure on the stream: its connection, or a
// reset; c.mu held.
func (st *stream) upFailed(err error, b *batch) {
	held(&st.c.mu)
	c := st.c
	h := c.s
	st.dropUp(b)
	if st.done {
		return
	}
	o := &st.req.Record
	st.req.ServedAt = time.Now()
	if !st.headersSent {
		switch {
		case st.grpc && h.cfg.Cut():
			// A gRPC call still waiting for its headers when the drain's
			// end cut the upstream's connections: UNAVAILABLE, as a
			// stream under way is told.
			st.answerAs(outcome.DrainTimeout, b)
		case h.cfg.Cut():
			st.answerAs(outcome.UpstreamTimeout, b)
		case st.callExpired():
			st.expired = true
			st.answer(outcome.ClientClosed, 0, "deadline exceeded\n", b)
			o.Status = outcome.StatusClientClosed
		default:
			o.UpstreamErr = err
			st.answerAs(outcome.UpstreamError, b)
		}
		return
	}
	switch {
	case st.grpc && h.cfg.Cut() && !st.down.fin:
		// A gRPC stream under way that the drain's end cut: it ends
		// with trailers that say so, and that a gRPC client takes as
		// "try again, elsewhere", rather than a reset, which it takes as
		// an internal error.
		o.Kind = outcome.DrainTimeout
		_, msg, _ := h.gate.Answer(outcome.DrainTimeout)
		st.down.trailers = []hpack.HeaderField{
			{Name: "grpc-status", Value: strconv.Itoa(grpcUnavailable)},
			{Name: "grpc-message", Value: strings.TrimSuffix(msg, "\n")},
			{Name: outcomeHeader, Value: outcome.DrainTimeout.String()}}
		st.down.end = true
		st.pushDown(b)
		return
	case h.cfg.Cut():
		o.Kind = outcome.UpstreamTimeout
	case st.callExpired():
		o.Kind, o.Status = outcome.ClientClosed, outcome.StatusClientClosed
	default:
		o.Kind, o.UpstreamErr = outcome.UpstreamError, err
	}
	st.rstClient(http2.ErrCodeInternal, b)
	st.end(b)
}

// retry opens the stream again on another connection, when the upstream
// said it did not process it (a GOAWAY below it, REFUSED_STREAM) and
// nothing of its body went: RFC 9113, 8.7 makes that safe whatever the
// method. Once per stream, besides maxBlindRetries times for a stream
// opened on a connection whose SETTINGS had not come. c.mu held.
func (st *stream) retry(b *batch) bool {
	held(&st.c.mu)
	if st.done || st.headersSent || st.upForwarded > 0 {
		return false
	}
	switch {
	case st.upBlind && st.blindRetries < maxBlindRetries:
		st.blindRetries++
	case st.retried:
		return false
	default:
		st.retried = true
	}
	if u := st.u; u != nil {
		st.u = nil
		u.release(st, false, b)
	}
	st.up.fin, st.upEnd = false, false
	st.c.s.pool.open(st, b)
	return true
}

// dropUp leaves the upstream's stream, resetting it unless it ended;
// c.mu held.
func (st *stream) dropUp(b *batch) {
	held(&st.c.mu)
	u := st.u
	if u == nil {
		return
	}
	st.u = nil
	u.release(st, !(st.upEnd && st.up.fin), b)
}

// end ends the stream and counts it; c.mu held.
func (st *stream) end(b *batch) {
	held(&st.c.mu)
	if st.done {
		return
	}
	st.done = true
	c := st.c
	if st.timer != nil {
		st.timer.Stop()
	}
	if st.bodyTimer != nil {
		st.bodyTimer.Stop()
	}
	st.dropUp(b)
	delete(c.streams, st.id)
	st.up.buf, st.down.buf = nil, nil
	// Counted once the locks are let go (see batch.finish).
	st.endAt = time.Now()
	b.ended = append(b.ended, st)
	if c.goingAway && len(c.streams) == 0 {
		// Wake the reader, which closes the connection.
		_ = c.nc.SetReadDeadline(time.Now())
	}
}
