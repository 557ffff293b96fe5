// Package h2guard watches the frames of an HTTP/2 connection that Go's
// net/http server serves, both ways, for what that server leaves to its
// users: how fast a client may reset the streams it opens, how long it may
// take over a header block, how long its streams may wait for a window it
// never grants, and the answers the server gives on its own, which carry
// nothing of the user's. It reads frame headers as they pass (and the
// client's header blocks, with a decoder of its own), never buffers a
// frame it lets through, and can end the connection with a GOAWAY of its
// own, written between two of the server's frames.
package h2guard

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Reason says why the guard ended a connection.
type Reason uint8

const (
	// RapidReset: the client reset more streams before their answer than
	// its budget allows (CVE-2023-44487).
	RapidReset Reason = iota + 1
	// Stalled: a handler's write waited StallTimeout with no DATA frame
	// written to the client meanwhile: its streams could not progress.
	Stalled
	// HeaderTimeout: a header block was not whole within HeaderTimeout.
	HeaderTimeout
)

func (r Reason) String() string {
	switch r {
	case RapidReset:
		return "rapid_reset"
	case Stalled:
		return "stalled"
	case HeaderTimeout:
		return "header_timeout"
	}
	return "unknown"
}

// why is a Reason in words, for the GOAWAY's debug data.
func (r Reason) why() string {
	switch r {
	case RapidReset:
		return "too many streams reset before their answer"
	case Stalled:
		return "no flow-control window granted"
	case HeaderTimeout:
		return "header block not complete in time"
	}
	return ""
}

// Answer is an answer the server gave on its own, before any handler: to
// a header block over MaxHeaderListSize (431), or to a request carrying a
// field HTTP/2 forbids (400).
type Answer struct {
	Status int
	// Method and Path are the request's, as far as the block had them.
	Method, Path string
	// Start is when the request's first HEADERS frame arrived.
	Start time.Time
}

// Config describes what a guard bounds, and whom it tells. Share one among
// all connections; it must not change once in use.
type Config struct {
	// HeaderTimeout bounds a header block, from its HEADERS frame's
	// header to the end of its last frame: past it, the stream is answered
	// 408 (with OutcomeHeader: TimeoutOutcome) and the connection ended.
	// The server reads nothing else meanwhile (a block is contiguous), and
	// its own timeout is its idle timeout. If zero, no bound.
	HeaderTimeout time.Duration
	// StallTimeout ends a connection on which a handler's write (see
	// BeginWrite) has waited this long with no DATA frame written to the
	// client: its streams cannot progress, and what they hold is held for
	// nobody. If zero, never.
	StallTimeout time.Duration
	// ResetBurst and ResetRate are the client's budget of premature
	// resets, resets of streams the server had not answered yet:
	// ResetBurst at once, refilled at ResetRate a second and by one for
	// each stream answered. Past it the connection is ended. If ResetBurst
	// is zero, resets are not counted.
	ResetBurst int
	ResetRate  float64
	// MaxHeaderListSize is the server's bound on a decoded header block,
	// as net/http computes it from Server.MaxHeaderBytes (those plus 320):
	// a block over it gets the server's own 431.
	MaxHeaderListSize uint32
	// OutcomeHeader names the field added to the server's own answers,
	// with OwnOutcome as its value, and to the guard's 408, with
	// TimeoutOutcome. Lower case. If empty, nothing is added.
	OutcomeHeader, OwnOutcome, TimeoutOutcome string
	// Answered is told of each of the server's own answers as it goes
	// out. TimedOut is told of each 408, and Ended of each connection the
	// guard ends, and why, before the client can hear of it. Each may be
	// nil; each is called on a goroutine of the connection's and must be
	// quick.
	Answered func(c *Conn, a Answer)
	TimedOut func(c *Conn, start time.Time)
	Ended    func(c *Conn, r Reason)
}

// Conn is a served HTTP/2 connection under watch. Hand it to the server
// in place of the connection it wraps.
type Conn struct {
	net.Conn
	cfg *Config

	// in is the reader's state, owned by the goroutine the server reads
	// with (one at a time: the preface's, then the frames').
	in inbound

	// The writer's state. The server writes one frame at a time, from one
	// goroutine or another; the guard writes between them.
	wmu  sync.Mutex
	out  outbound
	wbuf []byte
	shut bool // the guard's last frames are out: the server's are refused

	// mu guards what the reader, the writer, handlers and timers share.
	mu sync.Mutex
	// unanswered holds the streams opened and not answered (no HEADERS
	// written) nor reset, while resets are counted.
	unanswered map[uint32]struct{}
	tokens     float64
	refilled   time.Time
	// own holds the streams the server will answer on its own; anyOwn is
	// set once it is made, for the writer's look without the lock.
	own    map[uint32]Answer
	anyOwn atomic.Bool
	// ending is set once the guard ends the connection; inject holds its
	// last frames until they can go out between the server's.
	ending  atomic.Bool
	inject  []byte
	endedAt time.Time
	// The header block open past a read, if any.
	block      blockWatch
	blockTimer *time.Timer
	// Writes under way (BeginWrite), and the stall watch.
	writes     int
	stallArmed bool
	stallSeen  uint64
	stallTimer *time.Timer
	// progress counts the DATA frames written to the client.
	progress atomic.Uint64

	// Where the server is in the client's byte stream: consumed is what it
	// has read, boundary the position at which it last asked for a frame's
	// first byte, which it does only once it has handled the frame before.
	// Settle waits on wake for boundary to move.
	consumed atomic.Int64
	boundary atomic.Int64
	waiters  atomic.Int32
	wake     chan struct{}
	// lastReset is the position after the last RST_STREAM frame read.
	lastReset atomic.Int64
	// maxStream is the highest stream the client opened.
	maxStream atomic.Uint32

	sock sock
}

// blockWatch is a header block that stayed open past a read.
type blockWatch struct {
	open   bool
	stream uint32
	start  time.Time
}

// New watches c under cfg.
func New(c net.Conn, cfg *Config) *Conn {
	g := &Conn{Conn: c, cfg: cfg}
	g.in.preface = len(preface)
	g.in.init(g)
	g.tokens = float64(cfg.ResetBurst)
	if cfg.ResetBurst > 0 {
		g.unanswered = make(map[uint32]struct{})
	}
	g.boundary.Store(-1)
	g.sock.init(c)
	return g
}

// Read reads the client's bytes for the server, and reads its frames on
// their way.
func (c *Conn) Read(p []byte) (int, error) {
	if c.in.atBoundary() {
		c.reachedBoundary()
	}
	if c.ending.Load() {
		// The server is to stop reading, and end the connection.
		return 0, io.EOF
	}
	n, err := c.sock.read(c.Conn, p)
	if n > 0 {
		c.consumed.Add(int64(n))
		c.in.inspect(p[:n])
		if c.in.blockOpen() {
			c.watchBlock()
		}
	}
	c.sock.active.Store(false)
	return n, err
}

// reachedBoundary notes that the server asks for a frame's first byte: it
// has handled every frame before.
func (c *Conn) reachedBoundary() {
	c.boundary.Store(c.consumed.Load())
	if c.waiters.Load() > 0 {
		c.mu.Lock()
		if c.wake != nil {
			close(c.wake)
			c.wake = nil
		}
		c.mu.Unlock()
	}
}

// Settle waits, for up to max or until ctx ends, until the server has
// handled every frame the client had sent when Settle was called that may
// reset a stream: those it has read, and those waiting in the socket. A
// handler that settles before it forwards its request knows, from its
// context, whether the client reset the stream in the same breath as it
// opened it (HEADERS then RST_STREAM, the rapid reset): the server hands
// the stream to its handler as soon as it has read its HEADERS, before it
// reads what follows.
func (c *Conn) Settle(ctx context.Context, max time.Duration) {
	target, ok := c.settleTarget()
	// Most often the server is still handling the stream's own HEADERS,
	// and moves on within microseconds: a yield or two, before a wait
	// that takes a timer and a channel.
	for range 3 {
		if ok && c.boundary.Load() >= target {
			return
		}
		runtime.Gosched()
		if !ok {
			target, ok = c.settleTarget()
		}
	}
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	t := time.NewTimer(max)
	defer t.Stop()
	for {
		if !ok {
			// A read was taking bytes: once counted, they tell.
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				return
			default:
			}
			runtime.Gosched()
			target, ok = c.settleTarget()
			continue
		}
		c.mu.Lock()
		if c.boundary.Load() >= target || c.ending.Load() {
			c.mu.Unlock()
			return
		}
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return
		case <-t.C:
			return
		}
	}
}

// settleTarget is the position up to which the server must have handled
// the client's frames for Settle: after the last reset read, or after the
// bytes waiting in the socket. ok is false while a read is taking bytes
// from the socket that are not counted yet: neither figure tells then.
func (c *Conn) settleTarget() (target int64, ok bool) {
	read := c.consumed.Load()
	n := c.sock.pending()
	if c.sock.active.Load() || c.consumed.Load() != read {
		return 0, false
	}
	if n > 0 {
		return read + int64(n), true
	}
	return c.lastReset.Load(), true
}

// Write writes the server's bytes, reading its frames on their way; the
// guard's own frames go between two of them.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.shut {
		return 0, net.ErrClosed
	}
	b := c.out.pass(c, p)
	last := false
	if c.ending.Load() && c.out.atBoundary() {
		if inj := c.takeInject(); inj != nil {
			// A copy: b may be p itself, the server's buffer. Once a
			// connection, at its end.
			b = append(append([]byte(nil), b...), inj...)
			last = true
		}
	}
	if len(b) > 0 {
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
	}
	if last {
		c.shut = true
	}
	return len(p), nil
}

// Close closes the connection, once the guard's last frames, if any wait,
// are out.
func (c *Conn) Close() error {
	if c.ending.Load() && c.wmu.TryLock() {
		if !c.shut && c.out.atBoundary() {
			if inj := c.takeInject(); inj != nil {
				_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Conn.Write(inj)
			}
		}
		c.shut = true
		c.wmu.Unlock()
	}
	c.mu.Lock()
	for _, t := range []*time.Timer{c.blockTimer, c.stallTimer} {
		if t != nil {
			t.Stop()
		}
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

func (c *Conn) takeInject() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.inject
	c.inject = nil
	return b
}

// end ends the connection for r: frames (the GOAWAY, after any answer)
// are written between two of the server's frames, now if the server is
// not writing, else after its frame; the server's reads then fail, so
// that it shuts the connection down, and its close of it lingers, reading
// what the client still sends, so that the GOAWAY is not lost to a reset.
func (c *Conn) end(r Reason, frames []byte) {
	c.mu.Lock()
	if c.ending.Load() {
		c.mu.Unlock()
		return
	}
	c.inject = frames
	c.endedAt = time.Now()
	c.ending.Store(true)
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
	c.mu.Unlock()
	// Told before the client can hear of it.
	if f := c.cfg.Ended; f != nil {
		f(c, r)
	}
	if l, ok := c.Conn.(interface{ LingerOnClose() }); ok {
		l.LingerOnClose()
	}
	if c.wmu.TryLock() {
		if !c.shut && c.out.atBoundary() {
			if inj := c.takeInject(); inj != nil {
				_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Conn.Write(inj); err == nil {
					c.shut = true
				}
			}
		}
		c.wmu.Unlock()
	}
	// A read that waits returns at once, and every later one io.EOF.
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
}

// goAway ends the connection for r with a GOAWAY alone.
func (c *Conn) goAway(r Reason) {
	c.end(r, goAway(c.maxStream.Load(), errEnhanceYourCalm, r.why()))
}

// Ending reports whether the guard is ending the connection.
func (c *Conn) Ending() bool { return c.ending.Load() }

// opened notes a stream the client opened.
func (c *Conn) opened(id uint32) {
	c.maxStream.Store(id)
	if c.unanswered == nil {
		return
	}
	c.mu.Lock()
	c.unanswered[id] = struct{}{}
	c.mu.Unlock()
}

// clientReset counts a reset of the client's: premature when the stream
// had no answer yet.
func (c *Conn) clientReset(id uint32) {
	c.lastReset.Store(c.consumed.Load())
	if c.unanswered == nil {
		return
	}
	c.mu.Lock()
	_, premature := c.unanswered[id]
	if !premature {
		c.mu.Unlock()
		return
	}
	delete(c.unanswered, id)
	delete(c.own, id)
	now := time.Now()
	if !c.refilled.IsZero() {
		c.tokens = min(c.tokens+now.Sub(c.refilled).Seconds()*c.cfg.ResetRate, float64(c.cfg.ResetBurst))
	}
	c.refilled = now
	c.tokens--
	over := c.tokens < 0
	c.mu.Unlock()
	if over {
		c.goAway(RapidReset)
	}
}

// answering is told of the server's HEADERS frame on a stream: it answers
// the stream, which is no longer unanswered, and it is reported whether
// the answer is the server's own.
func (c *Conn) answering(id uint32) (a Answer, own bool) {
	if c.unanswered == nil && !c.anyOwn.Load() {
		return Answer{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.unanswered[id]; ok {
		delete(c.unanswered, id)
		c.tokens = min(c.tokens+1, float64(c.cfg.ResetBurst))
	}
	a, own = c.own[id]
	if own {
		delete(c.own, id)
	}
	return a, own
}

// serverReset is told of the server's RST_STREAM frame: the stream gets
// no answer.
func (c *Conn) serverReset(id uint32) {
	if c.unanswered == nil && !c.anyOwn.Load() {
		return
	}
	c.mu.Lock()
	delete(c.unanswered, id)
	delete(c.own, id)
	c.mu.Unlock()
}

// ownAnswer notes that the server will answer stream id itself.
func (c *Conn) ownAnswer(id uint32, a Answer) {
	c.mu.Lock()
	if c.own == nil {
		c.own = make(map[uint32]Answer)
		c.anyOwn.Store(true)
	}
	c.own[id] = a
	c.mu.Unlock()
}

// watchBlock arms the header block's timer, if the open block has none.
func (c *Conn) watchBlock() {
	if c.cfg.HeaderTimeout <= 0 {
		return
	}
	c.in.watched = true
	c.mu.Lock()
	defer c.mu.Unlock()
	c.block = blockWatch{open: true, stream: c.in.blk.stream, start: c.in.blk.start}
	wait := c.cfg.HeaderTimeout - time.Since(c.block.start)
	if c.blockTimer == nil {
		c.blockTimer = time.AfterFunc(wait, c.blockTimedOut)
		return
	}
	c.blockTimer.Reset(wait)
}

// blockEnded stops the header block's timer.
func (c *Conn) blockEnded() {
	c.mu.Lock()
	if c.block.open {
		c.block.open = false
		c.blockTimer.Stop()
	}
	c.mu.Unlock()
}

// blockTimedOut answers, at HeaderTimeout, the stream whose header block
// is still open, and ends the connection.
func (c *Conn) blockTimedOut() {
	c.mu.Lock()
	b := c.block
	if !b.open {
		c.mu.Unlock()
		return
	}
	if time.Since(b.start) < c.cfg.HeaderTimeout {
		// A later block's, rearmed: not yet.
		c.blockTimer.Reset(c.cfg.HeaderTimeout - time.Since(b.start))
		c.mu.Unlock()
		return
	}
	c.block.open = false
	c.mu.Unlock()
	block := statusOnly("408", c.cfg.OutcomeHeader, c.cfg.TimeoutOutcome)
	if c.cfg.OutcomeHeader == "" {
		block = []byte{0x08, 3, '4', '0', '8'}
	}
	frames := appendFrameHeader(nil, len(block), frameHeaders, flagEndHeaders|flagEndStream, b.stream)
	frames = append(frames, block...)
	frames = append(frames, goAway(b.stream, errEnhanceYourCalm, HeaderTimeout.why())...)
	if f := c.cfg.TimedOut; f != nil {
		f(c, b.start)
	}
	c.end(HeaderTimeout, frames)
}

// BeginWrite tells the guard that a handler's write to the client is under
// way, one that may wait for the client's flow-control window; EndWrite
// that it ended. While one is under way, a connection on which no DATA
// frame goes out for StallTimeout is ended.
func (c *Conn) BeginWrite() {
	if c.cfg.StallTimeout <= 0 {
		return
	}
	c.mu.Lock()
	c.writes++
	if !c.stallArmed {
		c.stallArmed = true
		c.stallSeen = c.progress.Load()
		if c.stallTimer == nil {
			c.stallTimer = time.AfterFunc(c.cfg.StallTimeout, c.stallCheck)
		} else {
			c.stallTimer.Reset(c.cfg.StallTimeout)
		}
	}
	c.mu.Unlock()
}

// EndWrite ends what BeginWrite began.
func (c *Conn) EndWrite() {
	if c.cfg.StallTimeout <= 0 {
		return
	}
	c.mu.Lock()
	c.writes--
	c.mu.Unlock()
}

// stallCheck looks, every StallTimeout while writes are under way, for a
// DATA frame written since the last look.
func (c *Conn) stallCheck() {
	c.mu.Lock()
	if c.writes == 0 {
		c.stallArmed = false
		c.mu.Unlock()
		return
	}
	if p := c.progress.Load(); p != c.stallSeen {
		c.stallSeen = p
		c.stallTimer.Reset(c.cfg.StallTimeout)
		c.mu.Unlock()
		return
	}
	c.stallArmed = false
	c.mu.Unlock()
	c.goAway(Stalled)
}
