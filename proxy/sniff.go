package proxy

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// h2Preface is what a client speaking HTTP/2 with prior knowledge sends
// first (RFC 9113, 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniffer sits between the traffic listener and fasthttp: it looks at
// each new connection's first bytes without taking them (MSG_PEEK) and
// hands the connections that open with the HTTP/2 preface to the HTTP/2
// server; fasthttp gets the others, unwrapped, so that HTTP/1.1 keeps its
// single writev per response and pays nothing per request. A connection
// whose first bytes have not arrived when it is accepted is watched on a
// goroutine of its own until they do, or until the header timeout
// closes it without an answer, as fasthttp would.
type sniffer struct {
	*listener
	h2      func(net.Conn)
	timeout time.Duration

	conns chan net.Conn
	errc  chan error
	once  sync.Once
}

func newSniffer(l *listener, h2 func(net.Conn), timeout time.Duration) *sniffer {
	return &sniffer{listener: l, h2: h2, timeout: timeout, conns: make(chan net.Conn), errc: make(chan error, 1)}
}

// Accept returns the next HTTP/1 connection.
func (s *sniffer) Accept() (net.Conn, error) {
	s.once.Do(func() { go s.run() })
	select {
	case c := <-s.conns:
		return c, nil
	case err := <-s.errc:
		s.errc <- err // for a later Accept
		return nil, err
	}
}

func (s *sniffer) run() {
	for {
		c, err := s.listener.Accept()
		if err != nil {
			s.errc <- err
			return
		}
		var b [len(h2Preface)]byte
		n, err, ok := peek(c, b[:], 0, false)
		switch {
		case !ok:
			s.deliver(c)
		case err != nil:
			c.Close()
			s.connClosed()
		default:
			switch classify(b[:n]) {
			case isHTTP1:
				s.deliver(c)
			case isHTTP2:
				go s.h2(c)
			default:
				go s.wait(c)
			}
		}
	}
}

// deliver hands c to fasthttp, or closes it if fasthttp stopped taking
// connections.
func (s *sniffer) deliver(c net.Conn) {
	select {
	case s.conns <- c:
	case <-s.closed:
		c.Close()
		s.connClosed()
	}
}

// wait watches a connection until its first bytes tell its protocol.
func (s *sniffer) wait(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.timeout))
	var b [len(h2Preface)]byte
	have := 0
	for {
		n, err, _ := peek(c, b[:], have, true)
		have = n
		if err != nil || n == 0 {
			// Nothing within the header timeout, or the client left.
			c.Close()
			s.connClosed()
			return
		}
		switch classify(b[:n]) {
		case isHTTP1:
			_ = c.SetReadDeadline(time.Time{})
			s.deliver(c)
			return
		case isHTTP2:
			_ = c.SetReadDeadline(time.Time{})
			s.h2(c)
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
	case !bytes.HasPrefix([]byte(h2Preface), b[:min(len(b), len(h2Preface))]):
		return isHTTP1
	case len(b) >= len(h2Preface):
		return isHTTP2
	}
	return undecided
}
