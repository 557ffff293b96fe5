package rawio

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// nothingFor reports whether peer receives nothing for d.
func nothingFor(t *testing.T, peer interface {
	io.Reader
	SetReadDeadline(time.Time) error
}, d time.Duration) bool {
	t.Helper()
	peer.SetReadDeadline(time.Now().Add(d))
	defer peer.SetReadDeadline(time.Time{})
	_, err := peer.Read(make([]byte, 1))
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// A held write goes out with the next read, before it waits: the peer
// gets the answer, and the read returns what the peer sends after it.
func TestDeferredWriteGoesWithTheNextRead(t *testing.T) {
	c, peer := pair(t)
	c.DeferWrite()
	if n, err := c.Write([]byte("answer")); n != 6 || err != nil {
		t.Fatalf("Write = %d, %v; want 6, nil", n, err)
	}
	if !nothingFor(t, peer, 50*time.Millisecond) {
		t.Fatal("the peer received a held write before the next read")
	}
	type result struct {
		b   string
		err error
	}
	read := make(chan result, 1)
	go func() {
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		read <- result{string(buf[:n]), err}
	}()
	got := make([]byte, 6)
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil || string(got) != "answer" {
		t.Fatalf("peer read %q, %v; want the held answer", got, err)
	}
	peer.Write([]byte("next"))
	if r := <-read; r.err != nil || r.b != "next" {
		t.Fatalf("Read = %q, %v; want next", r.b, r.err)
	}
	// Once: the write after it is not held.
	c.Write([]byte("more"))
	if _, err := io.ReadFull(peer, got[:4]); err != nil || string(got[:4]) != "more" {
		t.Fatalf("peer read %q, %v; want more, at once", got[:4], err)
	}
}

// Every call other than a read makes the held write first: bytes leave in
// order, and a connection closed after a held write still delivers it.
func TestDeferredWriteMadeBeforeAnythingElse(t *testing.T) {
	for _, tc := range []struct {
		name string
		then func(c *Conn) error
		want string
	}{
		{"Write", func(c *Conn) error { _, err := c.Write([]byte("-b")); return err }, "a-b"},
		{"ReadFrom", func(c *Conn) error { _, err := c.ReadFrom(strings.NewReader("-body")); return err }, "a-body"},
		{"CloseWrite", func(c *Conn) error { return c.CloseWrite() }, "a"},
		{"Close", func(c *Conn) error { return c.Close() }, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t)
			c.DeferWrite()
			c.Write([]byte("a"))
			if err := tc.then(c); err != nil {
				t.Fatal(err)
			}
			peer.SetReadDeadline(time.Now().Add(5 * time.Second))
			got := make([]byte, len(tc.want))
			if _, err := io.ReadFull(peer, got); err != nil || string(got) != tc.want {
				t.Fatalf("peer read %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// A write larger than a held one can be goes out at once.
func TestDeferredWriteTooLargeGoesAtOnce(t *testing.T) {
	c, peer := pair(t)
	big := bytes.Repeat([]byte("x"), heldMax+1)
	c.DeferWrite()
	if _, err := c.Write(big); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(big))
	if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("peer read %d bytes, %v; want the write whole, without a read", len(got), err)
	}
}

// A close from another goroutine, as a server's shutdown closes an idle
// connection, races with the owner's next read: the held write goes out
// once, whichever makes it.
func TestDeferredWriteCloseRacesRead(t *testing.T) {
	for range 50 {
		c, peer := pair(t)
		c.DeferWrite()
		c.Write([]byte("answer"))
		done := make(chan struct{})
		go func() {
			c.Read(make([]byte, 8)) // ends with the close
			close(done)
		}()
		c.Close()
		<-done
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(peer)
		if string(got) != "answer" {
			t.Fatalf("peer read %q; want the held answer once", got)
		}
	}
}

func TestDeferredWriteAllocatesNothing(t *testing.T) {
	c, peer := pair(t)
	msg := []byte("0123456789")
	go echo(peer, len(msg))
	buf := make([]byte, len(msg))
	allocs := testing.AllocsPerRun(100, func() {
		c.DeferWrite()
		c.Write(msg)
		if n, err := c.Read(buf); err != nil || n != len(msg) {
			t.Fatalf("Read = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a held write and its read allocate %.1f times; want 0", allocs)
	}
}
