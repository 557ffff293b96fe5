package rawio

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// readErr reads one byte from c in the background and delivers the error
// with the time it came.
func readErr(c net.Conn) <-chan timedErr {
	ch := make(chan timedErr, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		ch <- timedErr{err, time.Now()}
	}()
	return ch
}

// registered is how many connections the reaper keeps.
func (r *reaperState) registered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

type timedErr struct {
	err error
	at  time.Time
}

// A deadline moved later while a read waits holds the read to the new one.
func TestDeadlineMovedLaterWhileBlocked(t *testing.T) {
	c, peer := pair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	got := readErr(c)
	time.Sleep(10 * time.Millisecond)
	c.SetReadDeadline(time.Now().Add(time.Hour))
	select {
	case r := <-got:
		t.Fatalf("Read ended at the deadline it no longer had: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	peer.Write([]byte("x"))
	if r := <-got; r.err != nil {
		t.Fatalf("Read = %v; want the byte sent", r.err)
	}
}

// A read that timed out reads again once its deadline is set anew.
func TestReadsAgainAfterATimeout(t *testing.T) {
	c, peer := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if r := <-readErr(c); !errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v; want a timeout", r.err)
	}
	peer.Write([]byte("x"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 1)
	if n, err := c.Read(b); n != 1 || err != nil {
		t.Fatalf("Read after a new deadline = %d, %v; want the byte sent", n, err)
	}
	c.SetReadDeadline(time.Time{})
	peer.Write([]byte("y"))
	if n, err := c.Read(b); n != 1 || err != nil || b[0] != 'y' {
		t.Fatalf("Read with no deadline = %d %q, %v; want y", n, b[:n], err)
	}
}

// A deadline set in the past ends a read already waiting, as net.Conn's
// does: the way a server interrupts a connection's read.
func TestPastDeadlineEndsAWaitingRead(t *testing.T) {
	c, _ := pair(t)
	got := readErr(c)
	time.Sleep(20 * time.Millisecond)
	c.SetReadDeadline(time.Now())
	select {
	case r := <-got:
		if !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read = %v; want a timeout", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline in the past did not end the read")
	}
}

// A deadline sooner than any the reaper waits for is met in its time, not
// the other's: the reaper, asleep until the hour is up, is woken.
func TestSoonerDeadlineIsMet(t *testing.T) {
	far, _ := pair(t)
	far.SetReadDeadline(time.Now().Add(time.Hour))
	time.Sleep(20 * time.Millisecond) // the reaper sleeps towards the hour
	c, _ := pair(t)
	set := time.Now()
	c.SetReadDeadline(set.Add(30 * time.Millisecond))
	select {
	case r := <-readErr(c):
		if !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read = %v; want a timeout", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sooner deadline was not met")
	}
}

// Deadlines are never met early, however many there are.
func TestManyDeadlinesNoneEarly(t *testing.T) {
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		c, _ := pair(t)
		d := time.Duration(10+3*i) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			due := time.Now().Add(d)
			c.SetReadDeadline(due)
			_, err := c.Read(make([]byte, 1))
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("Read = %v; want a timeout", err)
			}
			if early := time.Until(due); early > 0 {
				t.Errorf("deadline met %v early", early)
			}
		}()
	}
	wg.Wait()
}

// A closed connection's deadlines are forgotten with it, and setting one
// fails as net.Conn's does.
func TestClosedConnIsForgotten(t *testing.T) {
	before := reaper.registered()
	var conns []*Conn
	for range 5 {
		c, _ := pair(t)
		c.SetDeadline(time.Now().Add(time.Hour))
		conns = append(conns, c)
	}
	if got := reaper.registered(); got != before+5 {
		t.Fatalf("%d connections kept; want %d", got, before+5)
	}
	for _, c := range conns {
		c.Close()
		c.Close() // twice, as a caller may
	}
	if got := reaper.registered(); got != before {
		t.Fatalf("%d connections kept after closing; want %d", got, before)
	}
	if err := conns[0].SetReadDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("SetReadDeadline on a closed connection = %v; want net.ErrClosed", err)
	}
}

func TestSetDeadlineAllocatesNothing(t *testing.T) {
	c, _ := pair(t)
	allocs := testing.AllocsPerRun(100, func() {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		c.SetWriteDeadline(time.Now().Add(time.Minute))
	})
	if allocs != 0 {
		t.Fatalf("setting deadlines allocates %.1f times; want 0", allocs)
	}
}

// BenchmarkSetDeadline is one deadline set on a connection, as every phase
// of a request sets one: stored for the reaper, or the socket's own.
func BenchmarkSetDeadline(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(time.Hour)
		}
	}()
	tc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer tc.Close()
	for _, bc := range []struct {
		name string
		c    net.Conn
	}{{"net", tc}, {"rawio", Wrap(tc)}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.c.SetReadDeadline(time.Now().Add(time.Minute))
			}
		})
	}
}

// Deadlines set, moved and cleared from several goroutines while reads
// wait and connections close: every read ends by its last deadline, none
// hangs, and every closed connection is forgotten.
func TestDeadlinesUnderChurn(t *testing.T) {
	before := reaper.registered()
	const conns = 30
	var wg sync.WaitGroup
	for i := range conns {
		c, peer := pair(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			stop := make(chan struct{})
			// A second goroutine keeps moving the write deadline and now
			// and then clears it, as a server between responses does.
			go func() {
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					default:
					}
					if j%7 == 0 {
						c.SetWriteDeadline(time.Time{})
					} else {
						c.SetWriteDeadline(time.Now().Add(time.Duration(j%5) * time.Millisecond))
					}
					time.Sleep(time.Millisecond)
				}
			}()
			defer close(stop)
			for j := range 20 {
				d := time.Duration(1+(i+j)%10) * time.Millisecond
				due := time.Now().Add(d)
				c.SetReadDeadline(due)
				if j%4 == 0 {
					peer.Write([]byte("x")) // this read finds a byte
				}
				_, err := c.Read(make([]byte, 1))
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("Read = %v; want a byte or a timeout", err)
					return
				}
				if err != nil && time.Now().Before(due) {
					t.Errorf("Read timed out %v before its deadline", time.Until(due))
					return
				}
				if late := time.Since(due); err != nil && late > 2*time.Second {
					t.Errorf("Read ended %v after its deadline", late)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := reaper.registered(); n != before {
		t.Fatalf("%d connections kept after all closed; want %d", n, before)
	}
}

// A cut Group ends its members' waits, with a deadline or without, as at
// a deadline, and every deadline set on them afterwards has passed; a
// Conn outside the group goes on waiting.
func TestCutGroupEndsItsWaits(t *testing.T) {
	var g Group
	far, _ := pairIn(t, &g)
	far.SetReadDeadline(time.Now().Add(time.Hour))
	none, _ := pairIn(t, &g)
	outside, peer := pair(t)
	outside.SetReadDeadline(time.Now().Add(time.Hour))
	waits := []<-chan timedErr{readErr(far), readErr(none)}
	other := readErr(outside)
	time.Sleep(20 * time.Millisecond)
	cut := time.Now()
	g.Cut()
	for i, w := range waits {
		select {
		case r := <-w:
			if !errors.Is(r.err, os.ErrDeadlineExceeded) {
				t.Errorf("wait %d: Read = %v; want a timeout", i, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("wait %d: still reading 5s after the cut", i)
		}
	}
	t.Logf("waits ended %v after the cut", time.Since(cut))
	far.SetReadDeadline(time.Now().Add(time.Hour))
	if r := <-readErr(far); !errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Errorf("Read with a deadline set after the cut = %v; want a timeout", r.err)
	}
	select {
	case r := <-other:
		t.Fatalf("the Conn outside the group: Read = %v; want it still waiting", r.err)
	case <-time.After(50 * time.Millisecond):
	}
	peer.Write([]byte("x"))
	if r := <-other; r.err != nil {
		t.Errorf("the Conn outside the group: Read = %v; want the byte sent", r.err)
	}
}
