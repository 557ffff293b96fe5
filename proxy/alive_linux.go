package proxy

import (
	"net"
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
	state := peerOpen
	// Control, not Read: Read refuses once the connection's read deadline
	// has passed (the header timeout, long before a queued request's wait
	// ends), and would then report every waiter gone.
	err = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, errno := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errno == nil && n == 0:
			state = peerEnded
		case errno == nil, errno == syscall.EAGAIN, errno == syscall.EINTR:
		default:
			// ECONNRESET, or EPIPE for a reset after the client's FIN.
			state = peerReset
		}
	})
	if err != nil {
		return peerReset // closed on this side already
	}
	return state
}
