package rawio

import (
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A proxy sets a deadline on every phase of every request (the header
// read, the idle wait, the response's write, the upstream's answer) and
// almost never meets one. Handed to the runtime, each setting re-arms a
// timer in the runtime's heap, under its lock, after a clock reading of
// its own: measured at c50 on one CPU, 0.65 µs of a request's 11.7 (where
// HAProxy spent 10.0 on the whole request). Here a deadline is a
// number stored in the connection, and one goroutine, the reaper, looks
// at them when the earliest is due; it hands a deadline to the runtime,
// as a time already past, only once it has passed, which interrupts a
// read or write waiting on the socket and fails the next ones, as
// net.Conn's deadlines do. A deadline is met at most reapGap late.

// reapGap is the least time between two of the reaper's looks: what a
// deadline may be late by, and what bounds the reaper's work when
// deadlines move sooner all the time.
const reapGap = 5 * time.Millisecond

// base is the origin of the stored deadlines. Differences from it use the
// monotonic clock, as the runtime's deadlines do.
var base = time.Now()

// past is the time a deadline is given to the runtime once it has passed.
var past = time.Unix(1, 0)

// since is the reaper's clock: nanoseconds since base.
func since() int64 { return int64(time.Since(base)) }

// deadline is one direction's deadline of a Conn.
type deadline struct {
	// at is the deadline in nanoseconds since base, 0 for none.
	at atomic.Int64
	// armed is set while the runtime holds the passed deadline for the
	// socket: then reads (or writes) fail until the deadline is set again.
	armed atomic.Bool
}

const (
	read = iota
	write
)

// setDeadline stores t as the connection's deadline for dir.
func (c *Conn) setDeadline(dir int, t time.Time) error {
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	var at int64
	if !t.IsZero() {
		at = max(int64(t.Sub(base)), 1)
	}
	d := &c.dl[dir]
	if c.isCut() {
		// Passed, whatever t: a deadline already armed stays so.
		d.at.Store(1)
		if !d.armed.Load() {
			reaper.poke()
		}
		return nil
	}
	d.at.Store(at)
	// The reaper sets armed before it reads at, and this reads armed after
	// storing at: either it sees this deadline, or this sees armed and
	// waits for it to finish.
	if d.armed.Load() {
		c.dmu.Lock()
		if d.armed.Load() {
			_ = c.runtimeDeadline(dir, time.Time{})
			d.armed.Store(false)
		}
		c.dmu.Unlock()
	}
	if at != 0 && at < reaper.wake.Load() {
		reaper.poke()
	}
	return nil
}

// A Group is a set of Conns (WrapIn) whose waits can be ended together:
// a proxy's upstream connections, when it must stop before the upstream
// has answered.
type Group struct{ cut atomic.Bool }

// Cut makes every deadline of the group's Conns pass, within reapGap,
// and so every deadline set on them later: a read or write waiting on one
// fails as at its deadline, with a timeout. One with no deadline fails
// too. It cannot be undone.
func (g *Group) Cut() {
	g.cut.Store(true)
	reaper.poke()
}

// isCut says whether c's group was cut.
func (c *Conn) isCut() bool { return c.group != nil && c.group.cut.Load() }

// arm hands the connection's deadline for dir to the runtime if it has
// passed by now, and reports whether it had.
func (c *Conn) arm(dir int, now int64) bool {
	d := &c.dl[dir]
	c.dmu.Lock()
	defer c.dmu.Unlock()
	d.armed.Store(true)
	if at := d.at.Load(); at != 0 && at <= now {
		_ = c.runtimeDeadline(dir, past)
		return true
	}
	d.armed.Store(false)
	return false
}

// runtimeDeadline sets the socket's own deadline for dir.
func (c *Conn) runtimeDeadline(dir int, t time.Time) error {
	if dir == read {
		return c.tc.SetReadDeadline(t)
	}
	return c.tc.SetWriteDeadline(t)
}

// reaper keeps every open Conn and meets their deadlines.
var reaper = reaperState{kick: make(chan struct{}, 1)}

type reaperState struct {
	mu    sync.Mutex
	conns []*Conn // each Conn's index in it is its slot
	start sync.Once
	// wake is when the reaper looks next, in nanoseconds since base;
	// math.MaxInt64 while it looks, so that a deadline set meanwhile makes
	// it look again.
	wake atomic.Int64
	kick chan struct{}
}

// add registers c, whose deadlines the reaper meets from now on.
func (r *reaperState) add(c *Conn) {
	r.start.Do(func() { go r.run() })
	r.mu.Lock()
	c.slot = len(r.conns)
	r.conns = append(r.conns, c)
	r.mu.Unlock()
}

// remove forgets c, once it is closed.
func (r *reaperState) remove(c *Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := c.slot
	if i < 0 {
		return
	}
	last := len(r.conns) - 1
	r.conns[i] = r.conns[last]
	r.conns[i].slot = i
	r.conns[last] = nil
	r.conns = r.conns[:last]
	c.slot = -1
}

// poke makes the reaper look again, at most reapGap after its last look.
func (r *reaperState) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run looks at every deadline when the earliest is due, or when a sooner
// one is set, and hands those that have passed to the runtime.
func (r *reaperState) run() {
	timer := time.NewTimer(time.Hour)
	for {
		r.wake.Store(math.MaxInt64)
		now := since()
		next := r.look(now)
		r.wake.Store(next)
		if next == math.MaxInt64 {
			<-r.kick
		} else {
			timer.Reset(time.Duration(next - now))
			select {
			case <-r.kick:
				timer.Stop()
			case <-timer.C:
			}
		}
		if gap := time.Duration(since() - now); gap < reapGap {
			time.Sleep(reapGap - gap)
		}
	}
}

// look arms every deadline that has passed by now and returns the
// earliest of the others, math.MaxInt64 if there is none.
func (r *reaperState) look(now int64) int64 {
	next := int64(math.MaxInt64)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		cut := c.isCut()
		for dir := range c.dl {
			d := &c.dl[dir]
			if cut {
				// Passed, whenever it was due; also a wait without one.
				d.at.Store(1)
			}
			at := d.at.Load()
			if at == 0 || d.armed.Load() {
				continue
			}
			if at > now {
				next = min(next, at)
				continue
			}
			c.arm(dir, now)
		}
	}
	return next
}

// ReadDeadline is the read deadline last set, zero for none. One set
// before the process started, or on a cut Conn, reads as base.
func (c *Conn) ReadDeadline() time.Time {
	at := c.dl[read].at.Load()
	if at == 0 {
		return time.Time{}
	}
	return base.Add(time.Duration(at))
}
