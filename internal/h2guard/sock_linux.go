package h2guard

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// sock reads the client's socket for the guard, and tells how many of its
// bytes wait there unread: together, where the client is in its byte
// stream, without a gap while a read takes bytes from the socket.
type sock struct {
	raw syscall.RawConn

	// A read's buffer and result, set around raw.Read: its function is
	// made once, so that a read allocates nothing.
	rb     []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool
	// active is set from before a read takes bytes from the socket until
	// the guard has counted them (see Conn.counted): while it is clear, the
	// bytes read are counted and the rest wait in the socket.
	active atomic.Bool

	mu    sync.Mutex
	n     int
	ctlFn func(fd uintptr)
}

func (s *sock) init(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	s.raw = raw
	s.readFn = s.readOnce
	s.ctlFn = func(fd uintptr) { s.n = inq(fd) }
}

// read reads into p from the socket, or from c when the socket cannot be
// reached. The caller clears active once it has counted what was read.
func (s *sock) read(c net.Conn, p []byte) (int, error) {
	if s.raw == nil {
		return c.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	s.rb, s.rn, s.rerr = p, 0, nil
	err := s.raw.Read(s.readFn)
	n, rerr := s.rn, s.rerr
	s.rb, s.rerr = nil, nil
	if err == nil {
		err = rerr
	}
	return n, err
}

// readOnce is one attempt, as package rawio's: false asks raw.Read to wait
// until the socket is readable.
func (s *sock) readOnce(fd uintptr) bool {
	for {
		s.active.Store(true)
		n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(s.rb))), uintptr(len(s.rb)), 0, 0, 0)
		switch errno {
		case 0:
			s.rn = int(n)
			if n == 0 {
				s.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			s.active.Store(false)
			return false
		default:
			s.rerr = os.NewSyscallError("read", errno)
			return true
		}
	}
}

// pending is how many bytes wait in the socket, 0 when it cannot tell.
func (s *sock) pending() int {
	if s.raw == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n = 0
	if err := s.raw.Control(s.ctlFn); err != nil {
		return 0
	}
	return s.n
}

// inq is how many bytes wait unread in the socket fd, 0 when the ioctl
// fails: TIOCINQ, which Linux also calls SIOCINQ and FIONREAD, by the
// standard library's syscall package rather than x/sys, which the product
// does not otherwise need.
func inq(fd uintptr) int {
	var n int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
		return 0
	}
	return int(n)
}
