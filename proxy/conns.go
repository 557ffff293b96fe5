package proxy

import (
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/rawio"
)

// connState hears of every client connection's end, once, from fasthttp.
// A hijacked connection is not closed yet: whoever took it reports its
// end by connDone.
func (p *Proxy) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateClosed:
		p.clients.remove(c)
		p.upgrades.Abandoned(c)
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
