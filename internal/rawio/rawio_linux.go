package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Conn is a TCP connection whose reads and writes are raw system calls.
// Methods other than Read, Write and ReadFrom are the TCP connection's
// own.
type Conn struct {
	tc  *net.TCPConn
	raw syscall.RawConn

	// A read's buffer and result, set around raw.Read: its function is
	// made once, with the connection, so a read allocates nothing.
	rmu    sync.Mutex
	rb     []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wb      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool

	// WriteRead's state: whether its write is still to make, and whether
	// the socket took only part of it.
	writing, partial bool
	writeReadFn      func(fd uintptr) bool

	// linger is set by LingerOnClose.
	linger atomic.Bool

	// wrote is set once anything has been written: see Used.
	wrote atomic.Bool

	// Deadlines, read and write, met by the reaper (see deadline_linux.go).
	dl     [2]deadline
	dmu    sync.Mutex // serialises arming a deadline with setting it anew
	slot   int        // the Conn's index in the reaper's list, -1 once closed
	closed atomic.Bool
	group  *Group // nil when it belongs to none
}

// Wrap returns c as a Conn when it is a *net.TCPConn, and c itself
// otherwise.
func Wrap(c net.Conn) net.Conn { return WrapIn(c, nil) }

// WrapIn is Wrap, the Conn a member of g (nil for none).
func WrapIn(c net.Conn, g *Group) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rc := &Conn{tc: tc, raw: raw, group: g}
	rc.readFn = rc.read
	rc.writeFn = rc.write
	rc.writeReadFn = rc.writeRead
	reaper.add(rc)
	return rc
}

// Read reads as (*net.TCPConn).Read does.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.rb, c.rn, c.rerr = b, 0, nil
	err := c.raw.Read(c.readFn)
	afterRead()
	n, rerr := c.rn, c.rerr
	c.rb, c.rerr = nil, nil
	c.rmu.Unlock()
	if err == nil {
		err = rerr
	}
	if err != nil && err != io.EOF {
		err = c.opError("read", err)
	}
	return n, err
}

// read is one attempt: false asks raw.Read to wait until the socket is
// readable and try again. It is recvfrom, not read: read goes through the
// file layer's checks and notifications first, which a socket has no use
// for (with sendto for write, 0.2 µs of system time a proxied request).
func (c *Conn) read(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.rb))), uintptr(len(c.rb)), 0, 0, 0)
		switch errno {
		case 0:
			c.rn = int(n)
			if n == 0 {
				c.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.rerr = os.NewSyscallError("read", errno)
			return true
		}
	}
}

// Write writes all of b, as (*net.TCPConn).Write does, or fails.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	c.wb, c.wn, c.werr = b, 0, nil
	beforeWrite()
	err := c.raw.Write(c.writeFn)
	n, werr := c.wn, c.werr
	c.wb, c.werr = nil, nil
	c.wmu.Unlock()
	if err == nil {
		err = werr
	}
	if err != nil {
		err = c.opError("write", err)
	}
	return n, err
}

// WriteRead writes all of w and then reads into r, as Write then Read
// would: a request and the first bytes of its answer. Read would first
// find nothing, a system call that fails with EAGAIN, before it waits; here
// the write is made inside the read, after the runtime forgot any earlier
// readiness, so the wait needs no such call: the answer cannot come before
// the request, and its arrival after the write wakes the wait. A write the
// socket takes only part of is finished as Write does, and the read made
// as Read does.
func (c *Conn) WriteRead(w, r []byte) (int, error) {
	if len(w) == 0 || len(r) == 0 {
		if _, err := c.Write(w); err != nil {
			return 0, err
		}
		return c.Read(r)
	}
	c.rmu.Lock()
	c.wmu.Lock()
	c.wb, c.wn, c.werr = w, 0, nil
	c.rb, c.rn, c.rerr = r, 0, nil
	c.writing, c.partial = true, false
	beforeWrite()
	err := c.raw.Read(c.writeReadFn)
	if err == nil && c.partial {
		err = c.raw.Write(c.writeFn)
		if err == nil && c.werr == nil {
			err = c.raw.Read(c.readFn)
		}
	}
	afterRead()
	wrote := c.wn == len(c.wb)
	werr, n, rerr := c.werr, c.rn, c.rerr
	c.wb, c.werr, c.rb, c.rerr = nil, nil, nil, nil
	c.wmu.Unlock()
	c.rmu.Unlock()
	switch {
	case werr != nil:
		return 0, c.opError("write", werr)
	case err != nil && !wrote:
		return 0, c.opError("write", err)
	case err != nil:
		return n, c.opError("read", err)
	case rerr != nil && rerr != io.EOF:
		return n, c.opError("read", rerr)
	}
	return n, rerr
}

// writeRead is WriteRead's attempt: first the write, whole, then false to
// wait for the answer; after that, a read.
func (c *Conn) writeRead(fd uintptr) bool {
	if !c.writing {
		return c.read(fd)
	}
	c.writing = false
	if !c.write(fd) {
		c.partial = true // finished outside, where it may wait to write
		return true
	}
	return c.werr != nil
}

// ReadFrom copies r to the connection, writing each read at once, as
// (*net.TCPConn).ReadFrom does for a source it cannot splice: a
// bufio.Writer hands a streamed body to its writer's ReadFrom, and each
// piece of it must go out as it arrives, not when a buffer fills.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[copyBuf]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(writerOnly{c}, r, buf[:])
}

// copyBuf is io.Copy's own buffer size.
const copyBuf = 32 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyBuf]byte) }}

// writerOnly hides Conn's ReadFrom from io.CopyBuffer, which would call it.
type writerOnly struct{ io.Writer }

// write writes what the socket takes of what is left; false asks
// raw.Write to wait until it takes more. It is sendto, as read is
// recvfrom, with MSG_NOSIGNAL: a peer that reset the connection makes
// the call fail with EPIPE, and sends the process no signal.
func (c *Conn) write(fd uintptr) bool {
	for c.wn < len(c.wb) {
		rest := c.wb[c.wn:]
		n, _, errno := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)), syscall.MSG_NOSIGNAL, 0, 0)
		switch errno {
		case 0:
			c.wn += int(n)
			if !c.wrote.Load() {
				c.wrote.Store(true)
			}
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = os.NewSyscallError("write", errno)
			return true
		}
	}
	return true
}

// Used reports whether anything has been written on the connection: one
// taken from a pool that was has served a request before, and may have
// been closed by its peer while it sat idle.
func (c *Conn) Used() bool { return c.wrote.Load() }

// opError wraps err as net.Conn's errors are, naming the operation a raw
// connection would otherwise call raw-read or raw-write.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.tc.LocalAddr(), Addr: c.tc.RemoteAddr(), Err: err}
}

// Close closes the connection; its deadlines are forgotten.
func (c *Conn) Close() error {
	c.closed.Store(true)
	reaper.remove(c)
	if c.linger.CompareAndSwap(true, false) {
		// Once, should Close be called again. What was written is ended
		// by a half-close; what the peer still sends is read and thrown
		// away, up to lingerTime, before the close: closed with it
		// unread, the connection would be reset, and a reset can
		// overtake what was written.
		_ = c.tc.CloseWrite()
		go func() {
			_ = c.tc.SetReadDeadline(time.Now().Add(lingerTime))
			buf := copyBufs.Get().(*[copyBuf]byte)
			defer copyBufs.Put(buf)
			for {
				if _, err := c.tc.Read(buf[:]); err != nil {
					break
				}
			}
			_ = c.tc.Close()
		}()
		return nil
	}
	return c.tc.Close()
}

// lingerTime is how long a Close after LingerOnClose reads what the peer
// still sends.
const lingerTime = time.Second

// LingerOnClose makes Close end the connection gently: a half-close, then
// what the peer still sends read and thrown away for up to a second, then
// the close. It is for a server that answers a request whose body it did
// not read: the client is still sending it, and a plain close would reset
// the connection under the answer.
func (c *Conn) LingerOnClose() { c.linger.Store(true) }

// SetDeadline sets both deadlines, as net.Conn's does; they are met at
// most reapGap late.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.setDeadline(read, t); err != nil {
		return err
	}
	return c.setDeadline(write, t)
}

// SetReadDeadline sets the read deadline, as net.Conn's does; it is met at
// most reapGap late.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.setDeadline(read, t) }

// SetWriteDeadline sets the write deadline, as net.Conn's does; it is met
// at most reapGap late.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.setDeadline(write, t) }

func (c *Conn) CloseWrite() error                     { return c.tc.CloseWrite() }
func (c *Conn) CloseRead() error                      { return c.tc.CloseRead() }
func (c *Conn) LocalAddr() net.Addr                   { return c.tc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr                  { return c.tc.RemoteAddr() }
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }
