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
	state, _ := look(c)
	return state
}

// Quiet reports whether nothing at all has come from the other end of c:
// no byte, no FIN, no reset. A connection to an upstream, idle in a pool,
// must be quiet to be taken again: bytes that came while it was idle
// answer no request, and the next request would read them as its answer.
func Quiet(c net.Conn) bool {
	state, data := look(c)
	return state == Open && !data
}

// look peeks at c: what the other end did to it, and whether bytes wait.
func look(c net.Conn) (state State, data bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return Open, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return Open, false
	}
	pk := peeks.Get().(*peek)
	pk.state, pk.data = Open, false
	// Control, not Read: Read refuses once the connection's read deadline
	// has passed (the header timeout, long before a queued request's wait
	// ends), and would then report every waiter gone.
	err = raw.Control(pk.fn)
	state, data = pk.state, pk.data
	peeks.Put(pk)
	if err != nil {
		return Reset, false // closed on this side already
	}
	return state, data
}

// peek is one look at a socket. Pooled, with its function made once, so
// that a look allocates nothing but what SyscallConn does: a request that
// waited is looked at on its way to the upstream.
type peek struct {
	state State
	data  bool // a byte waits to be read
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
	case errno == nil:
		pk.data = true
	case errno == syscall.EAGAIN, errno == syscall.EINTR:
	default:
		// ECONNRESET, or EPIPE for a reset after the client's FIN.
		pk.state = Reset
	}
}
