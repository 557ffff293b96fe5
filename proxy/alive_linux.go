package proxy

import (
	"net"
	"syscall"
)

// peerGone reports whether the client at the other end of c has closed or
// reset the connection. It peeks without consuming, so bytes of a pipelined
// next request stay where fasthttp will read them. fasthttp has no
// notification of its own: the connection is not read while a handler runs.
// A client that half-closes after sending its request counts as gone, as it
// does for net/http and nginx.
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	// Control, not Read: Read refuses once the connection's read deadline
	// has passed (the header timeout, long before a queued request's wait
	// ends), and would then report every waiter gone.
	err = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, errno := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = n == 0 && errno == nil || errno == syscall.ECONNRESET
	})
	return gone || err != nil
}
