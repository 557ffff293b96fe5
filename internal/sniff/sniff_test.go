package sniff

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		in   string
		want protocol
	}{
		{"", undecided}, {"G", isHTTP1}, {"GET / HTTP/1.1\r\n", isHTTP1}, {"P", undecided},
		{"POST /", isHTTP1}, {"PRI * HTTP/2.0\r\n", undecided}, {"PRI * HTTP/1.1", isHTTP1},
		{Preface, isHTTP2}, {Preface + "\x00\x00", isHTTP2},
	} {
		if got := classify([]byte(c.in)); got != c.want {
			t.Errorf("classify(%q) = %v; want %v", c.in, got, c.want)
		}
	}
}

// TestListener: a preface sent in pieces goes to h2 with nothing taken
// from it; HTTP/1 goes to Accept; a silent connection is closed after the
// timeout.
func TestListener(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sniffing is implemented on Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h2 := make(chan string, 1)
	gone := make(chan struct{}, 1)
	l := New(ln, func(c net.Conn) {
		b := make([]byte, len(Preface))
		io.ReadFull(c, b)
		h2 <- string(b)
		c.Close()
	}, 200*time.Millisecond, func() { gone <- struct{}{} })
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()

	c1, _ := net.Dial("tcp", ln.Addr().String())
	defer c1.Close()
	c1.Write([]byte(Preface[:5]))
	time.Sleep(20 * time.Millisecond)
	c1.Write([]byte(Preface[5:]))
	if got := <-h2; got != Preface {
		t.Errorf("h2 read %q", got)
	}

	c2, _ := net.Dial("tcp", ln.Addr().String())
	defer c2.Close()
	c2.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	select {
	case c := <-accepted:
		b := make([]byte, 3)
		io.ReadFull(c, b)
		if string(b) != "GET" {
			t.Errorf("HTTP/1 connection read %q", b)
		}
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("HTTP/1 connection not accepted")
	}

	c3, _ := net.Dial("tcp", ln.Addr().String())
	defer c3.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("silent connection not closed")
	}
}

func TestBareLF(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"GET / HTTP/1.1\nHost: x\n\n", true},
		{"GET / HTTP/1.1\r\nHost: x\n\r\n", true},
		{"POST / HTTP/1.1\nHost: x\nContent-Length: 3\n\nabc", true},
		// A block not yet whole is not judged: the client may still be
		// sending, and a stall is the header timeout's.
		{"GET / HTTP/1.1\nHost: x\n", false},
		{"GET / HTTP/1.1\r\nHost: x\r\n", false},
		// A body's bare LFs are the body's.
		{"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\na\nb\n", false},
		// An empty line before the request line is not its end.
		{"\r\nGET / HTTP/1.1\r\n\r\n", false},
		{"", false},
	} {
		if got := BareLF([]byte(tt.in)); got != tt.want {
			t.Errorf("BareLF(%q) = %v; want %v", tt.in, got, tt.want)
		}
	}
}
