package h2c

import (
	"bufio"
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// errUpstreamProtocol is an upstream's breach of HTTP/2 on a stream.
var errUpstreamProtocol = errors.New("h2c: the upstream broke HTTP/2 on the stream")

// pool is the relay's HTTP/2 connections to the upstream: streams of
// every client share them, as many on each as the upstream allows, and a
// new one is dialled when none has room.
type pool struct {
	s     *Server
	addr  string
	mu    sync.Mutex
	conns []*uconn
	// dialing is the connection being dialled, and the streams that wait
	// for it.
	dialing *uconn
	waiters []*stream
	closed  bool
	// learned is the upstream's SETTINGS_MAX_CONCURRENT_STREAMS as its
	// last SETTINGS said, 0 until one did: a new connection assumes it
	// until its own SETTINGS come.
	learned uint32
}

// open gives st a stream upstream, now or once a connection is dialled;
// st.c.mu held.
func (p *pool) open(st *stream, b *batch) {
	held(&st.c.mu)
	p.mu.Lock()
	// A large upload goes on a connection that carries no other, while
	// there are fewer than maxUploadConns: uploads that share a
	// connection share its window, which the upstream may keep at 64 KiB.
	upload := st.isUpload()
	for _, u := range p.conns {
		if u.take(upload && len(p.conns) < maxUploadConns) {
			p.mu.Unlock()
			u.start(st, b)
			return
		}
	}
	if p.closed {
		p.mu.Unlock()
		st.upFailed(net.ErrClosed, b)
		return
	}
	p.waiters = append(p.waiters, st)
	if p.dialing == nil {
		p.dialing = &uconn{pool: p}
		go p.dial(p.dialing)
	}
	p.mu.Unlock()
}

// dial opens a connection to the upstream and starts the streams that
// waited for it.
func (p *pool) dial(u *uconn) {
	cfg := &p.s.cfg
	ctx, cancel := context.WithTimeout(context.Background(), cfg.UpstreamTimeout)
	nc, err := cfg.Dial(ctx, "tcp", p.addr)
	cancel()
	p.mu.Lock()
	learned := p.learned
	p.mu.Unlock()
	if err == nil {
		u.init(nc)
		if learned > 0 {
			u.maxStreams = learned
		}
	}
	p.mu.Lock()
	waiters := p.waiters
	p.waiters, p.dialing = nil, nil
	if err == nil {
		if p.closed {
			err = net.ErrClosed
			nc.Close()
		} else {
			p.conns = append(p.conns, u)
		}
	}
	p.mu.Unlock()
	if err == nil {
		go u.serve()
	}
	var b batch
	for _, st := range waiters {
		c := st.c
		c.mu.Lock()
		switch {
		case st.done:
		case err != nil:
			st.upFailed(err, &b)
		case u.take(st.isUpload() && p.spreads()):
			u.start(st, &b)
		default:
			// More waited than the new connection has room for, or
			// another large upload took it.
			p.open(st, &b)
		}
		c.mu.Unlock()
	}
	b.kick()
}

// spreads reports whether a large upload may still have an upstream
// connection of its own (see maxUploadConns).
func (p *pool) spreads() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) < maxUploadConns
}

// isUpload reports whether st is a large upload still to be sent (see
// maxUploadConns); c.mu held.
func (st *stream) isUpload() bool {
	return st.declared > StreamReceiveWindow && !st.up.fin
}

// remove drops a connection that failed or is going away.
func (p *pool) remove(u *uconn) {
	p.mu.Lock()
	for i, x := range p.conns {
		if x == u {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
}

// closeAll closes every connection to the upstream.
func (p *pool) closeAll() {
	p.mu.Lock()
	p.closed = true
	conns := append([]*uconn(nil), p.conns...)
	p.mu.Unlock()
	for _, u := range conns {
		u.nc.Close()
	}
}

// uconn is an HTTP/2 connection to the upstream. Its reader goroutine
// relays what the upstream sends to the streams' clients.
type uconn struct {
	pool *pool
	nc   net.Conn
	br   *bufio.Reader
	fr   *http2.Framer
	out  *out

	mu      sync.Mutex
	streams map[uint32]*stream
	nextID  uint32
	// active counts the streams open, or promised a place (take);
	// uploads those of them with a large body (see pool.open).
	active, uploads int
	// maxStreams is the upstream's SETTINGS_MAX_CONCURRENT_STREAMS, or
	// until its SETTINGS came (settled) what the pool learned, or
	// initialMaxStreams.
	maxStreams uint32
	settled    bool
	// sendWin is the upstream's connection window; initWin its
	// SETTINGS_INITIAL_WINDOW_SIZE.
	sendWin, initWin int32
	blocked          []*stream
	recvUsed         uint32
	// away is set once the upstream sent GOAWAY, or the connection
	// failed: no stream opens on it. goingAway is set once the relay
	// sent its own GOAWAY, which fail lets out before the close.
	away, goingAway bool
	// idleAt is when its last stream ended, zero while it has one; the
	// timer, armed while idleArmed, closes it upstreamIdleTimeout after.
	idleAt    time.Time
	idleTimer *time.Timer
	idleArmed bool
}

// initialMaxStreams is what an upstream connection is assumed to allow
// until its SETTINGS say (RFC 9113, 6.5.2 recommends no fewer than 100),
// as Go's Transport assumes: "unlimited", the RFC's initial value, put
// 400 streams on a connection to nghttpd, which allows 100, before its
// SETTINGS came, and it refused 300 of them.
const initialMaxStreams = 100

// maxBlindRetries is how often a stream refused (REFUSED_STREAM) by a
// connection whose SETTINGS had not come when it was opened there is
// opened again: it was refused for a limit the relay could not know.
// Refused once the limit was known, it is opened again once.
const maxBlindRetries = 4

// upstreamIdleTimeout closes an upstream connection with no stream open,
// as Go's Transport closes its idle connections: the pool shrinks back
// after the peak that grew it. A variable for a test to shorten.
var upstreamIdleTimeout = 90 * time.Second

// idle notes that u's last stream ended, and arms its timer; u.mu held.
func (u *uconn) idle() {
	held(&u.mu)
	u.idleAt = time.Now()
	if u.idleArmed {
		return
	}
	u.idleArmed = true
	if u.idleTimer == nil {
		u.idleTimer = time.AfterFunc(upstreamIdleTimeout, u.idleCheck)
	} else {
		u.idleTimer.Reset(upstreamIdleTimeout)
	}
}

// idleCheck closes u if it has had no stream for upstreamIdleTimeout,
// and waits again for what is left of it otherwise.
func (u *uconn) idleCheck() {
	p := u.pool
	p.mu.Lock()
	u.mu.Lock()
	u.idleArmed = false
	shut := false
	if len(u.streams) == 0 && u.active == 0 && !u.away && !u.idleAt.IsZero() {
		if left := upstreamIdleTimeout - time.Since(u.idleAt); left > 0 {
			u.idleArmed = true
			u.idleTimer.Reset(left)
		} else {
			u.away, shut = true, true
		}
	}
	u.mu.Unlock()
	if shut {
		for i, x := range p.conns {
			if x == u {
				p.conns = append(p.conns[:i], p.conns[i+1:]...)
				break
			}
		}
	}
	p.mu.Unlock()
	if shut {
		u.nc.Close()
	}
}

func (u *uconn) init(nc net.Conn) {
	u.nc = nc
	u.streams = make(map[uint32]*stream)
	u.nextID = 1
	u.maxStreams = initialMaxStreams
	u.sendWin, u.initWin = 65535, 65535
	// Idle until its first stream: one whose waiters all left goes too.
	u.mu.Lock()
	u.idle()
	u.mu.Unlock()
	u.br = bufio.NewReaderSize(nc, 16<<10)
	u.fr = http2.NewFramer(nil, u.br)
	u.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	u.fr.SetMaxReadFrameSize(1 << 20)
	// A response's header block is bounded as a request's is, ten times
	// over: the relay holds one while it relays it.
	u.fr.MaxHeaderListSize = 10 * (uint32(u.pool.s.cfg.MaxHeaderBytes) + 320)
	u.fr.SetReuseFrames()
	u.out = newOut(nc, u.pool.s.cfg.UpstreamTimeout, func(error) { nc.Close() })
	u.out.mu.Lock()
	u.out.buf = append(u.out.buf, http2.ClientPreface...)
	_ = u.out.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: upstreamStreamBuffer},
	)
	_ = u.out.fr.WriteWindowUpdate(0, connWindow-65535)
	u.out.mu.Unlock()
	go u.out.run(u.written)
	u.out.kick()
}

// lastStreamID is the largest stream id a client may use (RFC 9113,
// 5.1.1); a test lowers it to spend a connection's ids.
var lastStreamID uint32 = 1<<31 - 1

// take promises a stream a place on u, if it has room: u.mu guards the
// count, and the pool's lock may or may not be held.
//
// alone asks for a connection that carries no large upload.
func (u *uconn) take(alone bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.away || uint32(u.active) >= u.maxStreams || alone && u.uploads > 0 {
		return false
	}
	u.active++
	return true
}

// start opens st's stream on u, which take promised; st.c.mu held.
func (u *uconn) start(st *stream, b *batch) {
	held(&st.c.mu)
	fields := st.upstreamFields()
	u.mu.Lock()
	if u.away {
		// It went away, or spent its last stream id, between take and
		// now: nothing of st went on it, so another connection takes it.
		u.active--
		u.mu.Unlock()
		u.pool.open(st, b)
		return
	}
	st.u, st.upID = u, u.nextID
	st.upBlind = !u.settled
	if st.upload = st.isUpload(); st.upload {
		u.uploads++
	}
	u.nextID += 2
	u.idleAt = time.Time{}
	// The connection's last stream id: it takes no more streams, leaves
	// the pool for a new one, and closes after its last stream, as if
	// the upstream had said GOAWAY.
	spent := u.nextID > lastStreamID
	u.away = u.away || spent
	st.upWin = u.initWin
	u.streams[st.upID] = st
	u.out.mu.Lock()
	u.out.headers(st.upID, fields, st.up.end && len(st.up.buf) == 0 && st.up.trailers == nil)
	u.out.mu.Unlock()
	st.up.fin = st.up.end && len(st.up.buf) == 0 && st.up.trailers == nil
	u.mu.Unlock()
	if spent {
		u.pool.remove(u)
	}
	b.mark(u.out)
	st.pushUp(b)
}

// release ends st's stream on u, with RST_STREAM if rst; st.c.mu held.
func (u *uconn) release(st *stream, rst bool, b *batch) {
	held(&st.c.mu)
	u.mu.Lock()
	if st.up.queued {
		// Out of the streams held up by the connection's window: a
		// stream retried elsewhere must be able to join its new one's.
		if i := slices.Index(u.blocked, st); i >= 0 {
			u.blocked = slices.Delete(u.blocked, i, i+1)
		}
		st.up.queued = false
	}
	if u.streams[st.upID] == st {
		delete(u.streams, st.upID)
		u.active--
		if st.upload {
			u.uploads--
		}
		if rst {
			u.out.mu.Lock()
			u.out.rst(st.upID, http2.ErrCodeCancel)
			u.out.mu.Unlock()
			b.mark(u.out)
		}
	}
	idle := u.away && len(u.streams) == 0
	if len(u.streams) == 0 && !u.away {
		u.idle()
	}
	u.mu.Unlock()
	if idle {
		u.nc.Close()
	}
}

// written is told of what the upstream's writes did.
func (u *uconn) written(ws []written) {
	var b batch
	for _, w := range ws {
		w.s.sent(w, &b)
	}
	b.kick()
}

// lookup is the stream of upstream id, nil if it is gone.
func (u *uconn) lookup(id uint32) *stream {
	u.mu.Lock()
	st := u.streams[id]
	u.mu.Unlock()
	return st
}

// serve reads the upstream's frames until the connection ends.
func (u *uconn) serve() {
	var b batch
	var err error
	for {
		if u.br.Buffered() == 0 {
			b.kick()
		}
		var f http2.Frame
		f, err = u.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				u.streamFailed(se.StreamID, se.Code, &b)
				continue
			}
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				u.goAway(http2.ErrCode(ce))
			}
			break
		}
		err = u.handle(f, &b)
		if len(b.ended) > 0 {
			b.finish()
		}
		if err != nil {
			if ce, ok := err.(http2.ConnectionError); ok {
				u.goAway(http2.ErrCode(ce))
			}
			break
		}
	}
	b.kick()
	u.fail(err)
}

func (u *uconn) handle(f http2.Frame, b *batch) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		if st := u.lookup(f.StreamID); st != nil {
			st.c.mu.Lock()
			if st.u == u {
				st.respHeaders(f, b)
			}
			st.c.mu.Unlock()
		}
	case *http2.DataFrame:
		u.mu.Lock()
		u.out.took(&u.recvUsed, f.Length, b)
		st := u.streams[f.StreamID]
		u.mu.Unlock()
		if st == nil {
			return nil
		}
		data := f.Data()
		st.c.mu.Lock()
		if st.u == u {
			if pad := uint32(len(data)); pad < f.Length && !f.StreamEnded() {
				u.out.mu.Lock()
				u.out.windowUpdate(st.upID, f.Length-pad)
				u.out.mu.Unlock()
				b.mark(u.out)
			}
			st.respData(data, f.StreamEnded(), b)
		}
		st.c.mu.Unlock()
	case *http2.RSTStreamFrame:
		if st := u.lookup(f.StreamID); st != nil {
			st.c.mu.Lock()
			if st.u == u {
				if f.ErrCode == http2.ErrCodeNo && st.upEnd {
					// The response is whole: the upstream wants no more
					// of the body.
					st.up.fin = true
					st.up.buf = nil
					st.dropUp(b)
				} else if f.ErrCode != http2.ErrCodeRefusedStream || !st.retry(b) {
					st.upEnd = true
					st.upFailed(http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode}, b)
				}
			}
			st.c.mu.Unlock()
		}
	case *http2.WindowUpdateFrame:
		// The upstream's windows are checked as a client's are: one
		// that overflows wrapped negative, and held the body it bounds
		// to UpstreamTimeout.
		u.mu.Lock()
		var one [1]*stream
		var ready []*stream
		if f.StreamID == 0 {
			if int64(u.sendWin)+int64(f.Increment) > 1<<31-1 {
				u.mu.Unlock()
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
			u.sendWin += int32(f.Increment)
			ready, u.blocked = u.blocked, nil
			for _, st := range ready {
				st.up.queued = false
			}
		} else if st := u.streams[f.StreamID]; st != nil {
			if int64(st.upWin)+int64(f.Increment) > 1<<31-1 {
				u.mu.Unlock()
				u.streamFailed(f.StreamID, http2.ErrCodeFlowControl, b)
				return nil
			}
			st.upWin += int32(f.Increment)
			ready = append(one[:0], st)
		}
		u.mu.Unlock()
		for _, st := range ready {
			st.c.mu.Lock()
			st.pushUp(b)
			st.c.mu.Unlock()
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return u.onSettings(f, b)
	case *http2.PingFrame:
		if !f.IsAck() {
			u.out.mu.Lock()
			_ = u.out.fr.WritePing(true, f.Data)
			u.out.mu.Unlock()
			b.mark(u.out)
		}
	case *http2.GoAwayFrame:
		// No stream opens on it any more; those it will not serve fail,
		// the rest finish, and it closes after the last.
		u.mu.Lock()
		u.away = true
		var lost []*stream
		for id, st := range u.streams {
			if id > f.LastStreamID {
				lost = append(lost, st)
			}
		}
		idle := len(u.streams) == 0
		u.mu.Unlock()
		u.pool.remove(u)
		for _, st := range lost {
			st.c.mu.Lock()
			if st.u == u && !st.retry(b) {
				st.upFailed(errors.New("h2c: the upstream refused the stream (GOAWAY)"), b)
			}
			st.c.mu.Unlock()
		}
		if idle {
			return net.ErrClosed
		}
	}
	return nil
}

// onSettings applies the upstream's settings, held to what a client's
// are (see conn.onSettings): valid, 100 entries at most, one walk of the
// streams a frame.
func (u *uconn) onSettings(f *http2.SettingsFrame, b *batch) error {
	if f.NumSettings() > maxSettings {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		return err
	}
	var grown []*stream
	u.mu.Lock()
	u.out.mu.Lock()
	win, most, setWin := uint32(0), uint32(0), false
	limit, setLimit := uint32(0), false
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			win, most, setWin = s.Val, max(most, s.Val), true
		case http2.SettingMaxConcurrentStreams:
			limit, setLimit = s.Val, true
		case http2.SettingMaxFrameSize:
			u.out.maxFrame = s.Val
		case http2.SettingHeaderTableSize:
			u.out.enc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	var err error
	if delta := int64(win) - int64(u.initWin); setWin && (delta != 0 || most != win) {
		for _, st := range u.streams {
			if int64(st.upWin)+int64(most)-int64(u.initWin) > 1<<31-1 {
				err = http2.ConnectionError(http2.ErrCodeFlowControl)
				break
			}
			st.upWin += int32(delta)
			if delta > 0 {
				grown = append(grown, st)
			}
		}
		u.initWin = int32(win)
	}
	switch {
	case setLimit:
		u.maxStreams = limit
	case !u.settled:
		// No limit said: the RFC's initial value, unlimited.
		u.maxStreams = 1<<31 - 1
	}
	u.settled = true
	if err == nil {
		_ = u.out.fr.WriteSettingsAck()
	}
	u.out.mu.Unlock()
	u.mu.Unlock()
	if err != nil {
		return err
	}
	if setLimit {
		p := u.pool
		p.mu.Lock()
		p.learned = max(limit, 1)
		p.mu.Unlock()
	}
	b.mark(u.out)
	for _, st := range grown {
		st.c.mu.Lock()
		st.pushUp(b)
		st.c.mu.Unlock()
	}
	return nil
}

// goAway ends the connection for the upstream's breach of HTTP/2: the
// GOAWAY goes out before the connection closes (see fail).
func (u *uconn) goAway(code http2.ErrCode) {
	u.mu.Lock()
	u.away = true
	u.goingAway = true
	u.mu.Unlock()
	u.out.mu.Lock()
	if !u.out.closed {
		_ = u.out.fr.WriteGoAway(0, code, nil)
	}
	u.out.mu.Unlock()
	u.out.kick()
}

// streamFailed fails the stream of upstream id for the upstream's breach
// of HTTP/2 on it, and resets it with code.
func (u *uconn) streamFailed(id uint32, code http2.ErrCode, b *batch) {
	if st := u.lookup(id); st != nil {
		st.c.mu.Lock()
		if st.u == u {
			// Reset below with code, not by its release's CANCEL.
			st.upEnd, st.up.fin = true, true
			st.upFailed(errUpstreamProtocol, b)
		}
		st.c.mu.Unlock()
	}
	u.out.mu.Lock()
	u.out.rst(id, code)
	u.out.mu.Unlock()
	b.mark(u.out)
}

// fail ends the connection and fails its streams.
func (u *uconn) fail(err error) {
	u.pool.remove(u)
	u.mu.Lock()
	u.away = true
	said := u.goingAway
	streams := make([]*stream, 0, len(u.streams))
	for _, st := range u.streams {
		streams = append(streams, st)
	}
	u.mu.Unlock()
	u.out.close()
	if said {
		// The GOAWAY's code is the upstream's to hear: a second at most.
		select {
		case <-u.out.done:
		case <-time.After(time.Second):
		}
	}
	u.nc.Close()
	if err == nil || errors.Is(err, net.ErrClosed) {
		err = errors.New("h2c: the upstream closed the connection")
	}
	var b batch
	for _, st := range streams {
		st.c.mu.Lock()
		if st.u == u {
			st.upEnd = true
			st.upFailed(err, &b)
		}
		st.c.mu.Unlock()
	}
	b.kick()
}
