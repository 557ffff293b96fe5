package peer

import (
	"context"
	"net"
	"sync"
	"time"
)

// Departures notices clients that leave while their request waits for
// admission. fasthttp offers no such signal: a connection is not read while
// its handler runs. So the connections of waiting requests are peeked, all
// of them by one goroutine that runs only while some request waits; a
// waiting request costs no goroutine or timer of its own.
//
// The peeks are periodic, so a request admitted between two of them is
// best looked at once more at admission (Gone).
//
// Each wait has a context of its own, made for it and cancelled when its
// client is seen gone. Nothing is reused from one wait to the next, so a
// context's Done and Err always agree, whoever holds it and for however
// long.
type Departures struct {
	mu      sync.Mutex
	waits   []*departure
	running bool
	// due is the sweeper's scratch list, reused across sweeps.
	due []departure
}

// departure is one waiting request's connection and how to end its wait.
type departure struct {
	conn   net.Conn
	cancel context.CancelFunc
	next   time.Time     // when to peek next
	every  time.Duration // the interval after next
	index  int           // position in waits
}

// Peek intervals: a quick first look catches clients that time out almost
// at once; backing off keeps a long queue of waiters from costing a
// syscall storm. The sweep runs at the shortest interval and peeks only
// the connections that are due.
const (
	peekFirst = 50 * time.Millisecond
	peekMax   = 500 * time.Millisecond
)

// Wait returns the context of a wait on conn, and the function that ends
// the watch; the caller calls it once Acquire returns.
func (d *Departures) Wait(conn net.Conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &departure{conn: conn, cancel: cancel, next: time.Now().Add(peekFirst), every: 2 * peekFirst}
	d.mu.Lock()
	w.index = len(d.waits)
	d.waits = append(d.waits, w)
	if !d.running {
		d.running = true
		go d.sweep()
	}
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		last := len(d.waits) - 1
		d.waits[w.index] = d.waits[last]
		d.waits[w.index].index = w.index
		d.waits[last] = nil
		d.waits = d.waits[:last]
		d.mu.Unlock()
		cancel()
	}
}

// sweep peeks the due connections every peekFirst until no request waits.
func (d *Departures) sweep() {
	t := time.NewTicker(peekFirst)
	defer t.Stop()
	for now := range t.C {
		d.mu.Lock()
		if len(d.waits) == 0 {
			d.running = false
			d.mu.Unlock()
			return
		}
		// Copies, not pointers: once the lock is released a wait may end
		// and its record be dropped, and what is peeked below must be what
		// was due, not what replaced it.
		due := d.due[:0]
		for _, w := range d.waits {
			if now.Before(w.next) {
				continue
			}
			w.next, w.every = now.Add(w.every), min(2*w.every, peekMax)
			due = append(due, *w)
		}
		d.due = due
		d.mu.Unlock()
		// Peeking a connection whose wait has just ended is harmless: its
		// cancel ends a context nobody waits on any more. Even if fasthttp
		// has closed the connection since, the peek fails on the closed
		// net.Conn without touching its descriptor, which the kernel may
		// already have given to another.
		for i := range due {
			if Gone(due[i].conn) {
				due[i].cancel()
			}
			due[i] = departure{}
		}
	}
}
