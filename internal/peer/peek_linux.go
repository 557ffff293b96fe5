package peer

import (
	"net"
	"sync"
	"syscall"
)

// Peek reports what the client at the other end of c has done to the
// connection. It peeks without consuming, so bytes of a pipelined next
// request stay where fasthttp will read them. fasthttp has no notification
// of its own: the connection is not read while a handler runs.
func Peek(c net.Conn) State {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return Open
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Open
	}
	pk := peeks.Get().(*peek)
	pk.state = Open
	// Control, not Read: Read refuses once the connection's read deadline
	// has passed (the header timeout, long before a queued request's wait
	// ends), and would then report every waiter gone.
	err = raw.Control(pk.fn)
	state := pk.state
	peeks.Put(pk)
	if err != nil {
		return Reset // closed on this side already
	}
	return state
}

// peek is one look at a socket. Pooled, with its function made once, so
// that a look allocates nothing but what SyscallConn does: a request that
// waited is looked at on its way to the upstream.
type peek struct {
	state State
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
		pk.state = Ended
	case errno == nil, errno == syscall.EAGAIN, errno == syscall.EINTR:
	default:
		// ECONNRESET, or EPIPE for a reset after the client's FIN.
		pk.state = Reset
	}
}
