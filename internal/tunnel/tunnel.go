// Package tunnel relays the upgraded connections (WebSocket, or any
// protocol an Upgrade names) of a proxy, once the upstream has answered
// 101: both ways, bounded in number (with the client connections' own
// bound, which each one's upstream connection also counts against), timed
// when idle, and closed at a drain's end with a close frame each way.
package tunnel

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomgate/loomgate/internal/listen"
)

const (
	// closeGrace bounds what a tunnel does once it is told to stop: the
	// rest of a WebSocket frame in flight, then the close frames.
	closeGrace = time.Second
)

// Stats are the upgraded connections' figures.
type Stats struct {
	// Open is the upgraded connections open now.
	Open int64
	// FromClient and ToClient are the bytes relayed each way, over the
	// process's life.
	FromClient, ToClient uint64
}

// Upgraded describes one upgraded connection when it closes.
type Upgraded struct {
	// WebSocket is set when the protocol was WebSocket.
	WebSocket bool
	// Life is from the 101 to the close.
	Life time.Duration
	// FromClient and ToClient are the bytes relayed each way.
	FromClient, ToClient int64
}

// Config describes a Set.
type Config struct {
	// Max bounds the upgraded connections open at once. If zero,
	// unbounded.
	Max int
	// Idle closes an upgraded connection that carried no byte either way
	// for this long. If zero, never.
	Idle time.Duration
	// Closed, if set, is told of each upgraded connection's end.
	Closed func(Upgraded)
	// Released is told of each tunnel's end: its client connection's
	// place is given back.
	Released func()
	// Logger receives a tunnel's end for idleness, at debug level.
	Logger *slog.Logger
}

// Set keeps the upgraded connections of a proxy: the places reserved for
// handshakes, and the tunnels open.
type Set struct {
	max      int64 // 0: unbounded
	idle     time.Duration
	released func()
	log      *slog.Logger
	// slots is the traffic listener, whose bound on client connections
	// (MaxClientConns) each upgraded connection's own upstream connection
	// also counts against: it is a descriptor outside the upstream pool,
	// and ten thousand WebSockets under a bound of 19916 took the 20000
	// descriptors of the process, its admin port's included.
	slots atomic.Pointer[listen.Listener]
	// closed is told of each connection's end; nil when nobody listens.
	closed func(Upgraded)

	// open counts tunnels and the handshakes that reserved a place.
	open               atomic.Int64
	fromClient, toClnt atomic.Uint64

	mu       sync.Mutex
	tunnels  map[*Tunnel]struct{}
	draining bool
	wg       sync.WaitGroup
}

// NewSet returns an empty Set.
func NewSet(cfg Config) *Set {
	return &Set{max: int64(cfg.Max), idle: cfg.Idle, closed: cfg.Closed, released: cfg.Released, log: cfg.Logger}
}

// Bound makes l's bound on client connections count each upgraded
// connection's own upstream connection (see slots).
func (u *Set) Bound(l *listen.Listener) { u.slots.Store(l) }

// Reserve takes a place for a handshake, or reports false at the bound or
// while draining.
func (u *Set) Reserve() bool {
	u.mu.Lock()
	draining := u.draining
	u.mu.Unlock()
	if draining {
		return false
	}
	n := u.open.Add(1)
	if u.max > 0 && n > u.max {
		u.open.Add(-1)
		return false
	}
	if l := u.slots.Load(); l != nil && !l.TryTake() {
		u.open.Add(-1)
		return false
	}
	return true
}

// Unreserve gives back a place Reserve took.
func (u *Set) Unreserve() {
	if l := u.slots.Load(); l != nil {
		l.Give()
	}
	u.open.Add(-1)
}

// Abandon ends a tunnel whose client connection was closed instead of
// handed over to Run.
func (t *Tunnel) Abandon() {
	t.up.Close()
	t.u.Unreserve()
}

// Drain stops admitting handshakes, waits for the tunnels to close by
// themselves until ctx ends, then closes those left: a WebSocket gets a
// close frame (1001, going away) each way first.
func (u *Set) Drain(ctx context.Context) {
	u.mu.Lock()
	u.draining = true
	u.mu.Unlock()
	done := make(chan struct{})
	go func() {
		u.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	u.mu.Lock()
	for t := range u.tunnels {
		t.end()
	}
	u.mu.Unlock()
	t := time.NewTimer(2 * closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		u.mu.Lock()
		for t := range u.tunnels {
			t.client.Close()
			t.up.Close()
		}
		u.mu.Unlock()
	}
}

// Stats returns the upgraded connections' figures.
func (u *Set) Stats() Stats {
	return Stats{Open: u.open.Load(), FromClient: u.fromClient.Load(), ToClient: u.toClnt.Load()}
}

// New returns the tunnel of a handshake the upstream answered 101 on up
// (read through upR, which may hold what followed the 101), for the client
// connection client, whose 101 is head; websocket is set for WebSocket. It
// takes the handshake's place, and waits for Run, or Abandon.
func (u *Set) New(up net.Conn, upR *bufio.Reader, client net.Conn, head []byte, websocket bool) *Tunnel {
	return &Tunnel{u: u, up: up, upR: upR, client: client, head: head, websocket: websocket, stop: make(chan struct{})}
}

// Tunnel relays an upgraded connection both ways.
type Tunnel struct {
	u      *Set
	up     net.Conn      // the upstream connection
	upR    *bufio.Reader // up, with what arrived after the 101
	client net.Conn      // the client's connection itself, for deadlines
	head   []byte        // the 101 to write to the client
	// websocket is set when the protocol is WebSocket: frames are then
	// followed so that a stop can close at a frame's boundary.
	websocket bool

	stopOnce sync.Once
	stop     chan struct{}
	stopping atomic.Bool
	// last is when a byte last went either way (UnixNano).
	last atomic.Int64
}

// end tells the tunnel to stop.
func (t *Tunnel) end() {
	t.stopOnce.Do(func() {
		t.stopping.Store(true)
		close(t.stop)
		now := time.Now()
		_ = t.client.SetReadDeadline(now)
		_ = t.up.SetReadDeadline(now)
		// A side that does not read must not hold the stop either.
		_ = t.client.SetWriteDeadline(now.Add(closeGrace))
		_ = t.up.SetWriteDeadline(now.Add(closeGrace))
	})
}

// Run writes the 101 to c, the client's connection handed over (the
// hijack handler), and relays until either side closes, the tunnel idles
// past the idle timeout, or a drain ends it.
func (t *Tunnel) Run(c net.Conn) {
	u := t.u
	start := time.Now()
	u.mu.Lock()
	if u.tunnels == nil {
		u.tunnels = make(map[*Tunnel]struct{})
	}
	u.tunnels[t] = struct{}{}
	u.wg.Add(1)
	draining := u.draining
	u.mu.Unlock()
	var life Upgraded
	defer func() {
		t.up.Close()
		u.mu.Lock()
		delete(u.tunnels, t)
		u.mu.Unlock()
		u.Unreserve()
		u.wg.Done()
		u.released()
		if u.closed != nil && life.Life > 0 {
			u.closed(life)
		}
	}()
	if draining {
		// The drain may have passed its tunnels already.
		t.end()
	}
	_ = t.client.SetWriteDeadline(time.Now().Add(closeGrace * 10))
	if _, err := t.client.Write(t.head); err != nil {
		return
	}
	_ = t.client.SetWriteDeadline(time.Time{})
	t.last.Store(time.Now().UnixNano())

	var fromClient, toClient int64
	var toClientFrames, fromClientFrames *wsFrames
	if t.websocket {
		toClientFrames, fromClientFrames = new(wsFrames), new(wsFrames)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		fromClient, err = t.pipe(t.up, c, t.client, fromClientFrames, &u.fromClient)
		t.after(err, t.client)
	}()
	var err error
	toClient, err = t.pipe(t.client, t.upR, t.up, toClientFrames, &u.toClnt)
	t.after(err, t.up)
	<-done
	if t.stopping.Load() && t.websocket {
		t.closeFrames(fromClientFrames, toClientFrames)
	}
	life = Upgraded{WebSocket: t.websocket, Life: time.Since(start), FromClient: fromClient, ToClient: toClient}
}

// after handles one direction's end: its source closed (the other side
// hears of it by a half-close and may still answer), or it failed or
// stopped, which stops the other direction too. src is the side that was
// read.
func (t *Tunnel) after(err error, src net.Conn) {
	if err == nil && !t.stopping.Load() {
		// src closed its sending side: pass the half-close on.
		other := t.client
		if src == t.client {
			other = t.up
		}
		if cw, ok := other.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	t.end()
}

// pipe copies src to dst until src ends (nil), fails, idles past the idle
// timeout, or the tunnel stops; counted adds up the bytes.
func (t *Tunnel) pipe(dst net.Conn, src io.Reader, srcConn net.Conn, frames *wsFrames, counted *atomic.Uint64) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	idle := t.u.idle
	grace := false // the read deadline is the stop's grace
	for {
		limit := len(buf)
		if t.stopping.Load() {
			// Finish the frame under way, so that a close frame can
			// follow it, but no more.
			if frames == nil || frames.atBoundary() {
				return n, errStopped
			}
			limit = frames.want(limit)
			if !grace {
				grace = true
				_ = srcConn.SetReadDeadline(time.Now().Add(closeGrace))
			}
		} else if idle > 0 {
			_ = srcConn.SetReadDeadline(time.Now().Add(idle))
			if t.stopping.Load() {
				continue // end's wake-up may have been overwritten
			}
		}
		k, err := src.Read(buf[:limit])
		if k > 0 {
			if frames != nil {
				frames.feed(buf[:k])
			}
			t.last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			counted.Add(uint64(k))
		}
		switch {
		case err == nil:
		case err == io.EOF:
			return n, nil
		case !timedOut(err):
			return n, err
		case t.stopping.Load():
			if grace {
				return n, errStopped // the frame did not come in time
			}
		case idle > 0 && time.Since(time.Unix(0, t.last.Load())) < idle:
			// The other direction is busy: the tunnel is not idle.
		case idle > 0:
			t.u.log.Debug("upgraded connection idle; closing", "idle", idle)
			t.end()
		default:
			return n, err
		}
	}
}

var errStopped = errors.New("tunnel: stopped")

// closeFrames sends each side a WebSocket close frame, 1001 going away,
// when its direction stopped at a frame's boundary (otherwise the frame
// would corrupt the stream, and the connection is just closed).
func (t *Tunnel) closeFrames(fromClient, toClient *wsFrames) {
	deadline := time.Now().Add(closeGrace)
	if toClient.atBoundary() {
		_ = t.client.SetWriteDeadline(deadline)
		_, _ = t.client.Write([]byte{0x88, 0x02, 0x03, 0xe9})
	}
	if fromClient.atBoundary() {
		// A frame to a server is masked (RFC 6455, 5.3).
		m := rand.Uint32()
		k := [4]byte{byte(m), byte(m >> 8), byte(m >> 16), byte(m >> 24)}
		_ = t.up.SetWriteDeadline(deadline)
		_, _ = t.up.Write([]byte{0x88, 0x82, k[0], k[1], k[2], k[3], 0x03 ^ k[0], 0xe9 ^ k[1]})
	}
}

// wsFrames follows the frames of one direction of a WebSocket (RFC 6455,
// 5.2), only to know where each ends.
type wsFrames struct {
	hdr       [14]byte
	nh, need  int   // header bytes read, and the header's length once known
	remaining int64 // payload bytes still to come
}

func (f *wsFrames) atBoundary() bool { return f.nh == 0 && f.remaining == 0 }

// want bounds a read to the rest of the frame under way.
func (f *wsFrames) want(most int) int {
	if f.remaining > 0 {
		return int(min(int64(most), f.remaining))
	}
	if f.nh < 2 {
		return 2 - f.nh
	}
	return f.need - f.nh
}

func (f *wsFrames) feed(b []byte) {
	for len(b) > 0 {
		if f.remaining > 0 {
			k := min(int64(len(b)), f.remaining)
			f.remaining -= k
			b = b[k:]
			continue
		}
		f.hdr[f.nh] = b[0]
		f.nh++
		b = b[1:]
		if f.nh == 2 {
			f.need = 2
			if f.hdr[1]&0x80 != 0 {
				f.need += 4 // mask key
			}
			switch f.hdr[1] & 0x7f {
			case 126:
				f.need += 2
			case 127:
				f.need += 8
			}
		}
		if f.nh < 2 || f.nh < f.need {
			continue
		}
		var length int64
		switch l7 := f.hdr[1] & 0x7f; l7 {
		case 126:
			length = int64(f.hdr[2])<<8 | int64(f.hdr[3])
		case 127:
			for _, c := range f.hdr[2:10] {
				length = length<<8 | int64(c)
			}
		default:
			length = int64(l7)
		}
		f.nh, f.remaining = 0, length
	}
}

// timedOut reports whether err is a deadline's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
