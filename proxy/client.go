package proxy

import (
	"context"
	"net"
	"sync"
	"time"
)

// clientContext is the context a waiting request passes to the Admitter: it
// is done when the client closes its connection. fasthttp offers no such
// signal, so it is made here: the connection is polled, but only once
// something asks for Done, which the limiter does only on its slow path. An
// admitted-at-once request never starts a poller.
//
// One clientContext lives in each pooled exchange and serves one request at
// a time; stop ends its generation before the next begins.
type clientContext struct {
	conn net.Conn

	mu   sync.Mutex
	done chan struct{} // nil until Done is first called
	stop chan struct{} // closed by stop to end the poller
	gone bool
}

var _ context.Context = (*clientContext)(nil)

func (c *clientContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *clientContext) Value(any) any               { return nil }

func (c *clientContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return context.Canceled
	}
	return nil
}

func (c *clientContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		c.stop = make(chan struct{})
		if c.conn != nil {
			go c.poll(c.conn, c.done, c.stop)
		}
	}
	return c.done
}

// Poll intervals: a quick first look catches clients that time out almost
// at once; backing off keeps a long queue of waiters from costing a
// syscall storm.
const (
	pollFirst = 50 * time.Millisecond
	pollMax   = 500 * time.Millisecond
)

func (c *clientContext) poll(conn net.Conn, done, stop chan struct{}) {
	t := time.NewTimer(pollFirst)
	defer t.Stop()
	for interval := pollFirst; ; interval = min(2*interval, pollMax) {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if peerGone(conn) {
			c.mu.Lock()
			// stop is checked under the lock: once stop has closed, this
			// generation is over and must not touch the next one's state.
			select {
			case <-stop:
			default:
				c.gone = true
				close(done)
			}
			c.mu.Unlock()
			return
		}
		t.Reset(interval)
	}
}

// reset ends the current generation and readies c for the next request on
// conn (nil when the exchange goes back to its pool).
func (c *clientContext) reset(conn net.Conn) {
	c.mu.Lock()
	if c.stop != nil {
		close(c.stop)
	}
	c.conn, c.done, c.stop, c.gone = conn, nil, nil, false
	c.mu.Unlock()
}
