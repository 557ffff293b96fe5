package peer

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// pair is a connected TCP pair on loopback: the server's end and the
// client's.
func pair(t *testing.T) (server *net.TCPConn, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); c.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// eventually waits for Peek(c) to say want: what the client did takes a
// moment to arrive.
func eventually(t *testing.T, c net.Conn, want State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for Peek(c) != want {
		if time.Now().After(deadline) {
			t.Fatalf("Peek = %v; want %v", Peek(c), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPeek(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Peek looks only on Linux")
	}
	s, c := pair(t)
	if got := Peek(s); got != Open || Gone(s) || !Quiet(s) {
		t.Fatalf("Peek of a fresh connection = %v, Quiet %v; want Open and quiet", got, Quiet(s))
	}
	// Bytes of a next request are not a departure, and stay unread; but
	// the connection is not quiet.
	c.Write([]byte("GET"))
	time.Sleep(10 * time.Millisecond)
	if got := Peek(s); got != Open || Quiet(s) {
		t.Fatalf("Peek with bytes waiting = %v, Quiet %v; want Open, not quiet", got, Quiet(s))
	}
	buf := make([]byte, 3)
	if n, _ := s.Read(buf); string(buf[:n]) != "GET" {
		t.Fatalf("read %q after the peek; want the bytes peeked, GET", buf[:n])
	}

	if !Quiet(s) {
		t.Fatal("Quiet after the bytes were read = false; want true")
	}

	c.CloseWrite()
	eventually(t, s, Ended)
	if !Gone(s) || Quiet(s) {
		t.Errorf("after the client's FIN: Gone %v, Quiet %v; want gone, not quiet", Gone(s), Quiet(s))
	}

	s2, c2 := pair(t)
	c2.SetLinger(0) // a close with a reset
	c2.Close()
	eventually(t, s2, Reset)

	s3, _ := pair(t)
	s3.Close()
	if got := Peek(s3); got != Reset {
		t.Errorf("Peek of a connection closed on this side = %v; want Reset", got)
	}
}

func TestDeparturesEndTheWaitOfAClientWhoLeaves(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Peek looks only on Linux")
	}
	var d Departures
	s, c := pair(t)
	stay, _ := pair(t)
	ctx, done := d.Wait(s)
	defer done()
	ctxStay, doneStay := d.Wait(stay)
	c.Close()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the wait of a client that closed did not end within 5 s")
	}
	if ctxStay.Err() != nil {
		t.Errorf("the wait of a client still there ended: %v", ctxStay.Err())
	}
	doneStay()
	if ctxStay.Err() == nil {
		t.Error("the wait's context is still live after its done; want it cancelled")
	}
}

// BenchmarkQuiet is the look every pooled upstream connection gets before
// it is taken again.
func BenchmarkQuiet(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if !Quiet(c) {
			b.Fatal("not quiet")
		}
	}
}
