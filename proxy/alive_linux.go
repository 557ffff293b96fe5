package proxy

import (
	"net"
	"sync"
	"syscall"
)

// peekPeer reports what the client at the other end of c has done to the
// connection. It peeks without consuming, so bytes of a pipelined next
// request stay where fasthttp will read them. fasthttp has no notification
// of its own: the connection is not read while a handler runs.
func peekPeer(c net.Conn) peerState {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peerOpen
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return peerOpen
	}
	pk := peeks.Get().(*peek)
	pk.state = peerOpen
	// Control, not Read: Read refuses once the connection's read deadline
	// has passed (the header timeout, long before a queued request's wait
	// ends), and would then report every waiter gone.
	err = raw.Control(pk.fn)
	state := pk.state
	peeks.Put(pk)
	if err != nil {
		return peerReset // closed on this side already
	}
	return state
}

// peek is one look at a socket. Pooled, with its function made once, so
// that a look allocates nothing but what SyscallConn does: a request that
// waited is looked at on its way to the upstream.
type peek struct {
	state peerState
	b     [1]byte
	fn    func(fd uintptr)
}

var peeks = sync.Pool{New: func() any {
	pk := new(peek)
	pk.fn = pk.look
	return pk
}}

func (pk *peek) look(fd uintptr) {
	n, _, errno := syscall.Recvfrom(int(fd), pk.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case errno == nil && n == 0:
		pk.state = peerEnded
	case errno == nil, errno == syscall.EAGAIN, errno == syscall.EINTR:
	default:
		// ECONNRESET, or EPIPE for a reset after the client's FIN.
		pk.state = peerReset
	}
}
