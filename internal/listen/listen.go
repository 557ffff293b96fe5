// Package listen is the traffic listener as the proxy serves it: closed
// once by whoever closes first, retrying the accepts that more time can
// cure, and bounding the client connections open at once.
package listen

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener is the traffic listener as the proxy serves it. It exists for
// three reasons fasthttp's Serve does not cover:
//
//   - Shutdown may come before Serve has registered the listener with
//     fasthttp (a SIGTERM during start-up); fasthttp's shutdown then
//     returns at once and Serve, starting afterwards, would accept
//     forever. The proxy closes this listener itself, so Accept fails
//     whichever comes first.
//   - fasthttp ends Serve on any accept error it does not know as
//     temporary, and running out of file descriptors (EMFILE, ENFILE) is
//     one: the process would exit under a flood of connections, dropping
//     every request it held. Here such errors are counted, logged and
//     retried after a pause that grows to a second, as net/http, HAProxy
//     and nginx do; connections wait in the kernel's backlog meanwhile.
//   - A bound on the client connections open at once (the proxy's
//     MaxClientConns), so that
//     descriptors remain for the upstream and the admin listener. At the
//     bound Accept waits for a connection to close: new clients wait in
//     the backlog (as with HAProxy's maxconn), nothing is refused.
type Listener struct {
	net.Listener
	// slots holds one token per open client connection when the count is
	// bounded; nil when it is not.
	slots chan struct{}
	// open counts client connections accepted and not yet closed.
	open atomic.Int64
	// acceptErrors counts accept failures that were retried.
	acceptErrors *atomic.Uint64
	// onAcceptError is told of each retried failure, for the log.
	onAcceptError func(error)

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{}
}

// New serves ln with at most maxConns client connections open (0: no
// bound). Each failed accept that is retried is counted in acceptErrors
// and told to onAcceptError, each if not nil.
func New(ln net.Listener, maxConns int, acceptErrors *atomic.Uint64, onAcceptError func(error)) *Listener {
	l := &Listener{Listener: ln, acceptErrors: acceptErrors, onAcceptError: onAcceptError, closed: make(chan struct{})}
	if maxConns > 0 {
		l.slots = make(chan struct{}, maxConns)
	}
	return l
}

// acceptPause bounds the pause after a failed accept.
const (
	firstAcceptPause = 5 * time.Millisecond
	lastAcceptPause  = time.Second
)

// Accept waits for a free slot (when bounded), then for a connection;
// failures that more time can cure are retried, not returned.
func (l *Listener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err == nil {
			// The connection is returned as it is, not wrapped: what
			// comes next looks at its first bytes through *net.TCPConn.
			// Its close is reported by ConnClosed.
			l.open.Add(1)
			return c, nil
		}
		l.release()
		select {
		case <-l.closed:
			// fasthttp reads this as the end of Serve, not a failure.
			return nil, net.ErrClosed
		default:
		}
		if !retryable(err) {
			return nil, err
		}
		if l.acceptErrors != nil {
			l.acceptErrors.Add(1)
		}
		if l.onAcceptError != nil {
			l.onAcceptError(err)
		}
		pause = min(max(2*pause, firstAcceptPause), lastAcceptPause)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-l.closed:
			t.Stop()
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener once; later calls return the first one's
// result, so that both the proxy and fasthttp may close it.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.closeErr = l.Listener.Close()
	})
	return l.closeErr
}

// ConnClosed gives back the slot of a connection Accept returned; the
// caller reports each one's end once (fasthttp's Server.ConnState).
func (l *Listener) ConnClosed() {
	l.open.Add(-1)
	l.release()
}

// TryTake takes a slot for a descriptor other than a client connection's
// (an upgraded connection's own upstream connection, outside the pool that
// the bound already leaves room for), if one is free now, and reports
// whether it did; Give returns it. Unbounded, it always takes one.
func (l *Listener) TryTake() bool {
	if l.slots == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Give returns a slot TryTake took.
func (l *Listener) Give() { l.release() }

// Open is the number of client connections open now.
func (l *Listener) Open() int64 { return l.open.Load() }

func (l *Listener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

// retryable reports whether an accept error passes with time: the
// process or system is out of descriptors or buffers, or one connection
// was aborted before it was accepted.
func retryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range retryableErrnos {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// Conns are the client connections a server holds, so that a drain's end
// can cut their reads. Each costs a map entry from its accept to its
// close, nothing per request. The zero value is ready.
type Conns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Add notes c, accepted.
func (cc *Conns) Add(c net.Conn) {
	cc.mu.Lock()
	if cc.conns == nil {
		cc.conns = make(map[net.Conn]struct{})
	}
	cc.conns[c] = struct{}{}
	cc.mu.Unlock()
}

// Remove forgets c, closed or taken over.
func (cc *Conns) Remove(c net.Conn) {
	cc.mu.Lock()
	delete(cc.conns, c)
	cc.mu.Unlock()
}

// CutReads sets every connection's read deadline to at, a time passed:
// each read under way, or to come, fails as at a timeout.
func (cc *Conns) CutReads(at time.Time) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for c := range cc.conns {
		_ = c.SetReadDeadline(at)
	}
}
