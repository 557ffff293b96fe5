package rawio

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pair returns a wrapped connection and its plain peer, over loopback.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	return pairIn(t, nil)
}

// pairIn is pair, the Conn a member of g.
func pairIn(t *testing.T, g *Group) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	rc, ok := WrapIn(c, g).(*Conn)
	if !ok {
		t.Fatalf("Wrap(%T) did not wrap", c)
	}
	t.Cleanup(func() { rc.Close(); peer.Close() })
	return rc, peer
}

func TestRoundTrip(t *testing.T) {
	c, peer := pair(t)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(peer, got); err != nil || string(got) != "ping" {
		t.Fatalf("peer read %q, %v", got, err)
	}
	if _, err := peer.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "pong" {
		t.Fatalf("read %q, %v", got, err)
	}
}

// A write larger than the socket's buffers waits for the peer to read, and
// every byte arrives in order.
func TestWriteWaitsForSlowReader(t *testing.T) {
	c, peer := pair(t)
	want := make([]byte, 16<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	done := make(chan error, 1)
	go func() {
		n, err := c.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for got.Len() < len(want) {
		n, err := peer.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("peer read after %d bytes: %v", got.Len(), err)
		}
		if got.Len() < 1<<20 {
			time.Sleep(time.Millisecond) // slow at first: the socket's buffers fill
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("bytes arrived changed or out of order")
	}
}

func TestEOF(t *testing.T) {
	c, peer := pair(t)
	peer.Write([]byte("x"))
	peer.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "x" {
		t.Fatalf("ReadAll = %q, %v; want x and the end of stream", b, err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end = %d, %v; want 0, io.EOF", n, err)
	}
}

func TestReadDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline = %v; want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("error %#v; want a *net.OpError of op read", err)
	}
}

func TestWriteDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	// The peer never reads: the buffers fill, then the deadline passes.
	_, err := c.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline = %v; want a timeout", err)
	}
}

func TestCloseEndsBlockedRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read on a closed connection = %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked 5 s after Close")
	}
}

// A write to a peer that reset the connection fails with the system's
// error, as a *net.OpError, never a signal that ends the process.
func TestWriteToResetPeer(t *testing.T) {
	c, peer := pair(t)
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("after the reset"))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		t.Fatalf("Write to a reset peer = %v; want a *net.OpError of ECONNRESET or EPIPE", err)
	}
}

func TestWrapLeavesOtherConns(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap(net.Pipe()) = %T; want the pipe itself", got)
	}
}

func TestReadWriteAllocateNothing(t *testing.T) {
	c, peer := pair(t)
	msg := []byte("0123456789")
	buf := make([]byte, len(msg))
	allocs := testing.AllocsPerRun(100, func() {
		c.Write(msg)
		io.ReadFull(peer, buf)
		peer.Write(msg)
		io.ReadFull(c, buf)
	})
	if allocs != 0 {
		t.Fatalf("a write and a read allocate %.1f times; want 0", allocs)
	}
}

// A body streamed through a bufio.Writer goes out piece by piece: the
// writer hands the stream to ReadFrom, and a piece that does not fill a
// buffer must not wait there for the next.
func TestReadFromWritesEachPiece(t *testing.T) {
	c, peer := pair(t)
	pr, pw := io.Pipe()
	go bufio.NewWriter(c).ReadFrom(pr)
	pw.Write([]byte("first piece"))
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len("first piece"))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatalf("the first piece did not arrive while the stream stayed open: %v", err)
	}
	pw.Close()
}

// What one goroutine did before writing to a socket happens before what
// another does after reading it, for the race detector as for net.Conn.
func TestHandOffThroughSocket(t *testing.T) {
	c, peer := pair(t)
	shared := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil {
			t.Error(err)
			return
		}
		shared++ // after the read: ordered after the writer's increment
	}()
	shared++
	w := Wrap(peer.(*net.TCPConn))
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-done
}

// WriteRead writes the request and reads the answer, which comes only
// after it.
func TestWriteRead(t *testing.T) {
	c, peer := pair(t)
	go func() {
		b := make([]byte, 4)
		if _, err := io.ReadFull(peer, b); err == nil && string(b) == "ping" {
			peer.Write([]byte("pong"))
		}
	}()
	b := make([]byte, 16)
	n, err := c.WriteRead([]byte("ping"), b)
	if err != nil || string(b[:n]) != "pong" {
		t.Fatalf("WriteRead = %q, %v; want pong", b[:n], err)
	}
}

// A request larger than the socket takes at once is written whole before
// the answer is read.
func TestWriteReadLargeRequest(t *testing.T) {
	c, peer := pair(t)
	req := bytes.Repeat([]byte("x"), 16<<20)
	go func() {
		time.Sleep(50 * time.Millisecond) // the socket's buffers fill first
		n, _ := io.CopyN(io.Discard, peer, int64(len(req)))
		if n == int64(len(req)) {
			peer.Write([]byte("done"))
		}
	}()
	b := make([]byte, 16)
	n, err := c.WriteRead(req, b)
	if err != nil || string(b[:n]) != "done" {
		t.Fatalf("WriteRead = %q, %v; want done", b[:n], err)
	}
}

// An answer that does not come meets the read deadline, a read's timeout;
// a request the peer does not take meets the write deadline, a write's.
func TestWriteReadDeadlines(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	_, err := c.WriteRead([]byte("ping"), make([]byte, 16))
	var oe *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("WriteRead with no answer = %v; want a read timeout", err)
	}

	c, _ = pair(t)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = c.WriteRead(make([]byte, 64<<20), make([]byte, 16))
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("WriteRead to a peer that does not read = %v; want a write timeout", err)
	}
}

// A peer that closed answers with the end of the stream or a reset, never
// a hang.
func TestWriteReadClosedPeer(t *testing.T) {
	c, peer := pair(t)
	peer.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	n, err := c.WriteRead([]byte("ping"), make([]byte, 16))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WriteRead to a closed peer = %d, %v; want the end of stream or a reset", n, err)
	}
}

func TestWriteReadAllocatesNothing(t *testing.T) {
	c, peer := pair(t)
	msg := []byte("0123456789")
	go func() { // an echo server, for the whole test
		b := make([]byte, len(msg))
		for {
			if _, err := io.ReadFull(peer, b); err != nil {
				return
			}
			peer.Write(b)
		}
	}()
	buf := make([]byte, len(msg))
	allocs := testing.AllocsPerRun(100, func() {
		if n, err := c.WriteRead(msg, buf); err != nil || n != len(msg) {
			t.Fatalf("WriteRead = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("WriteRead allocates %.1f times; want 0", allocs)
	}
}

// Used: a connection is used once a write put bytes on it, whether by
// Write or WriteRead, and not by reads or a write of nothing.
func TestUsed(t *testing.T) {
	c, peer := pair(t)
	go peer.Write([]byte("hello"))
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(nil); err != nil {
		t.Fatal(err)
	}
	if c.Used() {
		t.Fatal("Used after a read and an empty write; want not yet")
	}
	go func() {
		b := make([]byte, 4)
		io.ReadFull(peer, b)
		peer.Write([]byte("pong"))
	}()
	if _, err := c.WriteRead([]byte("ping"), make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if !c.Used() {
		t.Fatal("not Used after WriteRead; want used")
	}
}
