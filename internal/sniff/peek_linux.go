package sniff

import (
	"io"
	"net"
	"syscall"
)

// peek reads what has arrived on c into b without taking it (MSG_PEEK).
// With wait it waits, up to c's read deadline, until more than have bytes
// are there; without, it returns at once, 0 when nothing is. A client
// that closed is io.EOF. It reports false when c cannot be peeked at,
// which is then served as HTTP/1.1.
func peek(c net.Conn, b []byte, have int, wait bool) (int, error, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, nil, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, nil, false
	}
	var n int
	var perr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK)
		switch {
		case perr == syscall.EAGAIN:
			n, perr = 0, nil
			return !wait
		case perr == nil && n == 0:
			perr = io.EOF
		case perr == nil && wait && n <= have:
			return false // nothing new: wait for the next bytes
		}
		return true
	})
	if err == nil {
		err = perr
	}
	return n, err, true
}
