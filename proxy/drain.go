package proxy

import (
	"cmp"
	"context"
	"time"
)

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
		p.upgrades.Drain(ctx)
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
	// What fasthttp reads before the handler (a small body, the body of
	// one admitted after a 100 Continue) fails as at HeaderTimeout: the
	// request is answered 408 and counted (see handleMalformed and
	// continued.Close), and its connection closes, where it was dropped
	// unanswered and uncounted when the process exited (after a 100
	// Continue, with a permit held). A connection between requests closes
	// without an answer, as at its idle timeout. A handler reads a client
	// only for a body over 8 KiB, and a read blocked there ends as at
	// UpstreamTimeout, whose deadline it also has (408); every later read
	// sets its own deadline. One inside its header block is no request
	// yet, and is closed unanswered (see handleMalformed). Answers being
	// written are untouched: only reads are cut.
	p.clients.CutReads(aLongTimeAgo)
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

// aLongTimeAgo is a deadline that has passed, whenever it is set.
var aLongTimeAgo = time.Unix(1, 0)
