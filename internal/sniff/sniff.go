// Package sniff tells HTTP/2 with prior knowledge (h2c) from HTTP/1 on one
// listener, by a new connection's first bytes, without consuming them.
package sniff

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// Preface is what a client speaking HTTP/2 with prior knowledge sends
// first (RFC 9113, 3.4).
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Listener sits between a listener and an HTTP/1 server: it looks at each
// new connection's first bytes without taking them (MSG_PEEK, on Linux)
// and hands the connections that open with the HTTP/2 preface to H2; its
// Accept returns the others, unwrapped, so that the HTTP/1 server keeps
// its own fast paths (fasthttp writes with writev only to a
// *net.TCPConn) and pays nothing per request. A connection whose first
// bytes have not arrived when it is accepted is watched on a goroutine of
// its own until they do, or until Timeout closes it without an answer.
// Elsewhere than on Linux every connection is returned as HTTP/1.
type Listener struct {
	ln      net.Listener
	h2      func(net.Conn)
	timeout time.Duration
	gone    func()
	// bareLF, if set, answers a connection whose first request is a whole
	// header block with bare LF line ends, which the HTTP/1 server would
	// leave waiting for a CRLF until its header timeout.
	bareLF func(net.Conn)

	conns     chan net.Conn
	errc      chan error
	start     sync.Once
	closeOnce sync.Once
	closed    chan struct{}
}

// New sniffs the connections of ln. h2 serves an HTTP/2 connection (on a
// goroutine of the Listener's); timeout bounds the wait for a new
// connection's first bytes (0: none); gone, if not nil, is called for each
// connection the Listener closed itself, never handed on.
func New(ln net.Listener, h2 func(net.Conn), timeout time.Duration, gone func()) *Listener {
	return &Listener{
		ln: ln, h2: h2, timeout: timeout, gone: gone,
		conns: make(chan net.Conn), errc: make(chan error, 1), closed: make(chan struct{}),
	}
}

// RefuseBareLF has the Listener answer, with answer, a connection whose
// first request ends its header lines in a bare LF (RFC 9112, 2.2 lets a
// server refuse them), instead of handing it on; the connection is closed
// after answer returns. Set it before the first Accept.
func (l *Listener) RefuseBareLF(answer func(net.Conn)) { l.bareLF = answer }

// Accept returns the next HTTP/1 connection, or the listener's error.
func (l *Listener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.run() })
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errc:
		l.errc <- err // for a later Accept
		return nil, err
	}
}

// Close closes the listener; connections still being sniffed are closed.
func (l *Listener) Close() error {
	l.stop()
	return l.ln.Close()
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

func (l *Listener) stop() { l.closeOnce.Do(func() { close(l.closed) }) }

func (l *Listener) run() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			l.stop()
			l.errc <- err
			return
		}
		var b [len(Preface)]byte
		n, err, ok := peek(c, b[:], 0, false)
		switch {
		case !ok:
			l.deliver(c)
		case err != nil:
			l.drop(c)
		default:
			switch classify(b[:n]) {
			case isHTTP1:
				l.http1(c)
			case isHTTP2:
				go l.h2(c)
			default:
				go l.wait(c)
			}
		}
	}
}

func (l *Listener) drop(c net.Conn) {
	c.Close()
	if l.gone != nil {
		l.gone()
	}
}

// deliver hands c to Accept, or closes it once the listener is closed.
func (l *Listener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		l.drop(c)
	}
}

// headerPeek bounds what is looked at for bare LF line ends: the header
// block of a first request, as far as it has arrived.
const headerPeek = 4 << 10

// http1 hands an HTTP/1 connection on, unless its first request is a
// whole header block with bare LF line ends and such are refused.
func (l *Listener) http1(c net.Conn) {
	if l.bareLF != nil {
		var b [headerPeek]byte
		if n, err, ok := peek(c, b[:], 0, false); ok && err == nil && BareLF(b[:n]) {
			go func() {
				l.bareLF(c)
				l.drop(c)
			}()
			return
		}
	}
	l.deliver(c)
}

// BareLF reports whether b begins with a whole header block (request line,
// headers and the empty line) of which some line ends in a bare LF. A
// block not yet whole is not judged.
func BareLF(b []byte) bool {
	bare := false
	start := 0
	for {
		i := bytes.IndexByte(b[start:], '\n')
		if i < 0 {
			return false
		}
		end := start + i
		line := b[start:end]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		} else {
			bare = true
		}
		if len(line) == 0 && start > 0 {
			return bare
		}
		start = end + 1
	}
}

// wait watches a connection until its first bytes tell its protocol.
func (l *Listener) wait(c net.Conn) {
	if l.timeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(l.timeout))
	}
	var b [len(Preface)]byte
	have := 0
	for {
		n, err, _ := peek(c, b[:], have, true)
		have = n
		if err != nil || n == 0 {
			// Nothing in time, or the client left.
			l.drop(c)
			return
		}
		switch classify(b[:n]) {
		case isHTTP1:
			_ = c.SetReadDeadline(time.Time{})
			l.http1(c)
			return
		case isHTTP2:
			_ = c.SetReadDeadline(time.Time{})
			l.h2(c)
			return
		}
	}
}

type protocol int

const (
	undecided protocol = iota
	isHTTP1
	isHTTP2
)

// classify tells the protocol from a connection's first bytes.
func classify(b []byte) protocol {
	switch {
	case len(b) == 0:
		return undecided
	case !bytes.HasPrefix([]byte(Preface), b[:min(len(b), len(Preface))]):
		return isHTTP1
	case len(b) >= len(Preface):
		return isHTTP2
	}
	return undecided
}
