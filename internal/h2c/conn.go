package h2c

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/loomgate/loomgate/internal/outcome"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// conn is a client's connection. Its reader goroutine reads its frames
// and is the only one to open or tear down its streams; mu guards the
// streams' state, which the upstream's readers, the streams' timers and
// their waits for admission also touch.
type conn struct {
	s      *Server
	nc     net.Conn
	br     *bufio.Reader
	fr     *http2.Framer
	out    *out
	remote net.Addr

	mu      sync.Mutex
	streams map[uint32]*stream
	// lastID is the highest stream the client opened.
	lastID uint32
	// sendWin is the client's connection window for the relay's DATA;
	// initWin its SETTINGS_INITIAL_WINDOW_SIZE, each stream's to begin.
	sendWin, initWin int32
	// blocked are the streams whose DATA waits for sendWin.
	blocked []*stream
	// recvUsed is what the client sent since the connection's window was
	// last given back.
	recvUsed uint32
	// pending are the streams opened in the batch of frames being read,
	// admitted once it is read.
	pending []*stream
	// goingAway is set once a GOAWAY went out: no stream opens after it.
	goingAway bool
	// stalled is set when the client took nothing of a write for the
	// stall timeout.
	stalled bool
	// resets is the budget of premature resets; settings that of
	// SETTINGS frames.
	resets, settings budget
	// idle is the budget of frames that carry nothing for a stream.
	idle budget
	// verdict is why the connection must end for its client's conduct:
	// set by the reader as it handles a frame, and acted on once the
	// frame is handled (see judge).
	verdict string
	// The stall watch: stallTimer runs while a stream's response waits
	// for the client's window, and progressAt is when the client last
	// granted any. ended is set once the watch ended the connection.
	stallTimer *time.Timer
	stallArmed bool
	progressAt time.Time
	ended      bool
}

func newConn(h *Server, nc net.Conn) *conn {
	c := &conn{s: h, nc: nc, remote: nc.RemoteAddr(), streams: make(map[uint32]*stream),
		sendWin: 65535, initWin: 65535}
	now := time.Now()
	c.resets = budget{left: resetBurst, at: now}
	c.settings = budget{left: settingsBurst, at: now}
	c.idle = budget{left: idleBurst, at: now}
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	// net/http's own reckoning of its bound on a header block.
	c.fr.MaxHeaderListSize = uint32(h.cfg.MaxHeaderBytes) + 320
	c.fr.SetMaxReadFrameSize(maxReadFrameSize)
	c.fr.SetReuseFrames()
	// What a stream's client may take to read its response, as on
	// HTTP/1.1, where it is the connection's write timeout: here the
	// whole connection's.
	c.out = newOut(nc, h.cfg.UpstreamTimeout, func(error) {
		c.mu.Lock()
		c.stalled = true
		c.mu.Unlock()
		nc.Close()
	})
	return c
}

// errCalm ends a connection for its conduct.
type errCalm string

func (e errCalm) Error() string { return string(e) }

// serve reads the connection's frames until it ends, then ends its
// streams.
func (c *conn) serve() {
	go c.out.run(c.written)
	err := c.read()
	c.teardown(err)
}

func (c *conn) read() error {
	h := c.s
	_ = c.nc.SetReadDeadline(time.Now().Add(h.cfg.HeaderTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil {
		return err
	}
	if string(preface[:]) != http2.ClientPreface {
		c.goAwayErr(http2.ErrCodeProtocol)
		return errors.New("bad preface")
	}
	c.out.mu.Lock()
	_ = c.out.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: MaxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: StreamReceiveWindow},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxReadFrameSize},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.fr.MaxHeaderListSize},
	)
	_ = c.out.fr.WriteWindowUpdate(0, connWindow-65535)
	c.out.mu.Unlock()
	c.out.kick()
	var b batch
	// What the last frames ended is counted however the reads end.
	defer b.kick()
	// dl is the deadline of the connection's reads between frames, and
	// shrinking is set when it is the second after which an idle
	// connection's buffers go.
	var dl time.Time
	shrinking := false
	arm := func(idle bool) {
		shrinking = idle && c.out.grown()
		if shrinking {
			// A second with no stream, and the buffers a burst grew
			// go: a connection kept open for long keeps little.
			dl = time.Now().Add(time.Second)
		} else {
			// Idle, or streams open that sent nothing for as long: their
			// own timers bound them, and the wake at this deadline finds
			// the connection idle once they ended. A draining one is
			// woken by its last stream's end.
			dl = time.Now().Add(idleTimeout)
		}
		_ = c.nc.SetReadDeadline(dl)
	}
	for {
		if c.br.Buffered() == 0 {
			c.admitPending(&b)
			b.kick()
			if err := c.judge(); err != nil {
				return err
			}
			// Armed under mu, as every wake (a drain's GOAWAY, the last
			// stream's end, the stall watch's) is set: a wake is never
			// undone by an arm that read the state before it.
			c.mu.Lock()
			idle, away, ended := len(c.streams) == 0, c.goingAway, c.ended
			if !ended && !(idle && away) {
				arm(idle)
			}
			c.mu.Unlock()
			if ended {
				return errCalm("ended by the stall watch")
			}
			if idle && away {
				return nil
			}
		}
		// A frame's first byte is waited for within dl, its header's
		// last within HeaderTimeout of that, as a frame's payload is
		// (see timed): a client that stops halfway through one holds
		// the connection's reads. Both are peeked, not read, so that a
		// wake that ends the wait early leaves what came in the buffer.
		_, err := c.br.Peek(1)
		if err == nil && c.br.Buffered() < frameHeaderLen {
			// What was read is handled before the wait for more.
			c.admitPending(&b)
			b.kick()
			if err = c.await(frameHeaderLen, time.Now().Add(h.cfg.HeaderTimeout)); err == errStalled {
				c.goAwayErr(http2.ErrCodeNo)
			}
			_ = c.nc.SetReadDeadline(dl)
		}
		var fh http2.FrameHeader
		if err == nil {
			fh, err = c.fr.ReadFrameHeader()
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.mu.Lock()
				idle, away, ended := len(c.streams) == 0, c.goingAway, c.ended
				c.mu.Unlock()
				// Nothing is buffered: the loop's top arms the next wait.
				switch {
				case ended:
					return err
				case away && !idle:
					continue // woken to see whether the last stream ended
				case shrinking && !away:
					c.out.shrink()
					continue
				case !idle && !away:
					continue
				case !away:
					c.goAwayErr(http2.ErrCodeNo) // idle
				}
			}
			if ce, ok := err.(http2.ConnectionError); ok {
				c.goAwayErr(http2.ErrCode(ce))
			}
			if err == http2.ErrFrameTooLarge {
				c.goAwayErr(http2.ErrCodeFrameSize)
			}
			return err
		}
		// The rest of a frame, and of a header block, must come within
		// HeaderTimeout of its start: a client that sends a stream's
		// headers a byte at a time holds the connection's reads.
		timed := int(fh.Length) > c.br.Buffered() || fh.Type == http2.FrameHeaders && !fh.Flags.Has(http2.FlagHeadersEndHeaders)
		if timed {
			c.admitPending(&b)
			b.kick()
			until := time.Now().Add(h.cfg.HeaderTimeout)
			if n := int(fh.Length); n > c.br.Buffered() && n <= maxReadFrameSize {
				// Peeked whole, as the header is: a drain's wake leaves
				// what came. A header block's CONTINUATION frames, if
				// any, are read under the deadline alone.
				if err := c.await(n, until); err != nil {
					if err == errStalled {
						if fh.Type == http2.FrameHeaders {
							c.headerTimedOut(fh.StreamID)
						} else {
							c.goAwayErr(http2.ErrCodeNo)
						}
					}
					return err
				}
			}
			_ = c.nc.SetReadDeadline(until)
		}
		f, err := c.fr.ReadFrameForHeader(fh)
		if timed {
			_ = c.nc.SetReadDeadline(dl)
		}
		if err != nil {
			var se http2.StreamError
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &se):
				c.streamError(se.StreamID, se.Code, &b)
				if err := c.judge(); err != nil {
					return err
				}
				continue
			case errors.As(err, &ce):
				c.goAwayErr(http2.ErrCode(ce))
			case errors.Is(err, os.ErrDeadlineExceeded) && fh.Type == http2.FrameHeaders:
				c.headerTimedOut(fh.StreamID)
			}
			return err
		}
		if err := c.handle(f, &b); err != nil {
			return err
		}
		if len(b.ended) > 0 {
			b.finish()
		}
		if err := c.judge(); err != nil {
			return err
		}
	}
}

// judge ends the connection if the frame just handled spent a budget of
// its client's, or what is owed the client passed maxOwedBytes: frames
// that ask for an answer (PING, SETTINGS, streams refused) sent by a
// client that reads none of them. Looked at after every frame, not once
// the reads' buffer is empty, which a client that never stops writing
// seldom lets it be; reader only.
func (c *conn) judge() error {
	if c.verdict == "" && !c.out.over.Load() {
		return nil
	}
	if c.verdict == "" {
		c.verdict = "answers unread"
	}
	c.calm(c.verdict)
	return errCalm(c.verdict)
}

// await waits until n bytes are buffered, by until: a wake that ends the
// wait early (a drain's) leaves the deadline in force, and the stall
// watch's, which ends the connection, ends the wait. Past until the
// client stalled: errStalled, and its streams end client_timeout.
func (c *conn) await(n int, until time.Time) error {
	for {
		_ = c.nc.SetReadDeadline(until)
		_, err := c.br.Peek(n)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		c.mu.Lock()
		ended, stalled := c.ended, !c.ended && !time.Now().Before(until)
		c.stalled = c.stalled || stalled
		c.mu.Unlock()
		if ended {
			return err
		}
		if stalled {
			return errStalled
		}
	}
}

// errStalled ends a connection on which a frame stopped halfway for
// HeaderTimeout.
var errStalled = errors.New("h2c: a frame not finished within HEADER_TIMEOUT")

// handle acts on one frame the client sent.
func (c *conn) handle(f http2.Frame, b *batch) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f, b)
	case *http2.DataFrame:
		return c.onData(f, b)
	case *http2.RSTStreamFrame:
		return c.onReset(f, b)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f, b)
	case *http2.SettingsFrame:
		if f.IsAck() {
			c.idleFrame()
			return nil
		}
		return c.onSettings(f, b)
	case *http2.PingFrame:
		c.idleFrame()
		if f.IsAck() {
			return nil
		}
		c.out.mu.Lock()
		_ = c.out.fr.WritePing(true, f.Data)
		c.out.mu.Unlock()
		b.mark(c.out)
	case *http2.PriorityFrame:
		c.idleFrame()
		if f.StreamDep == f.StreamID {
			c.streamError(f.StreamID, http2.ErrCodeProtocol, b)
		}
	case *http2.PushPromiseFrame:
		c.goAwayErr(http2.ErrCodeProtocol)
		return errors.New("PUSH_PROMISE from a client")
	default:
		// GOAWAY (the client opens no more streams; those it has
		// finish), and frames of types the relay does not know.
		c.idleFrame()
	}
	return nil
}

// idleFrame charges the budget of frames that carry nothing for a stream
// one; by the reader.
func (c *conn) idleFrame() {
	c.mu.Lock()
	c.idleFrameLocked()
	c.mu.Unlock()
}

// idleFrameLocked is idleFrame, mu held.
func (c *conn) idleFrameLocked() {
	held(&c.mu)
	if !c.idle.spend(1, idleBurst, idleRate, time.Now()) {
		c.verdict = "frames that carry nothing"
	}
}

// busyFrame gives the budget of frames that carry nothing one back, for
// a frame that carried something: a stream opened, DATA with bytes in it
// either way; mu held.
func (c *conn) busyFrame() {
	held(&c.mu)
	c.idle.left = min(idleBurst, c.idle.left+1)
}

// onSettings applies the client's settings and acknowledges them.
//
// A frame of more than maxSettings entries ends the connection
// (PROTOCOL_ERROR), as Go's own server does: each INITIAL_WINDOW_SIZE
// walked every stream under the connection's lock. A frame that has
// several costs one walk, by the last of them, which is where the
// values in their order would leave each window: only the largest is
// checked for the overflow it would have made on the way. Past the
// budget of SETTINGS frames the connection gets a GOAWAY
// (ENHANCE_YOUR_CALM). Go's server also refuses a setting twice in a
// frame; the RFC asks for the values to be applied in their order
// (h2spec 6.5.3), and loomgate does.
func (c *conn) onSettings(f *http2.SettingsFrame, b *batch) error {
	if f.NumSettings() > maxSettings {
		c.goAwayErr(http2.ErrCodeProtocol)
		return errors.New("SETTINGS with too many entries")
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		if ce, ok := err.(http2.ConnectionError); ok {
			c.goAwayErr(http2.ErrCode(ce))
		}
		return err
	}
	c.mu.Lock()
	if !c.settings.spend(1, settingsBurst, settingsRate, time.Now()) {
		c.mu.Unlock()
		c.calm("SETTINGS flood")
		return errCalm("SETTINGS flood")
	}
	c.out.mu.Lock()
	win, most, setWin := uint32(0), uint32(0), false
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			win, most, setWin = s.Val, max(most, s.Val), true
		case http2.SettingMaxFrameSize:
			c.out.maxFrame = s.Val
		case http2.SettingHeaderTableSize:
			c.out.enc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	var err error
	var grown []*stream
	if delta := int64(win) - int64(c.initWin); setWin && (delta != 0 || most != win) {
		for _, st := range c.streams {
			if int64(st.sendWin)+int64(most)-int64(c.initWin) > 1<<31-1 {
				err = http2.ConnectionError(http2.ErrCodeFlowControl)
				break
			}
			st.sendWin += int32(delta)
			if delta > 0 {
				grown = append(grown, st)
			}
		}
		c.initWin = int32(win)
	}
	if err == nil {
		_ = c.out.fr.WriteSettingsAck()
	}
	c.out.mu.Unlock()
	for _, st := range grown {
		st.pushDown(b)
	}
	c.mu.Unlock()
	b.mark(c.out)
	if ce, ok := err.(http2.ConnectionError); ok {
		c.goAwayErr(http2.ErrCode(ce))
	}
	return err
}

// onWindowUpdate gives the relay more of the client's window.
func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame, b *batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.progressAt = time.Now()
	if f.StreamID == 0 {
		if int64(c.sendWin)+int64(f.Increment) > 1<<31-1 {
			c.goAwayLocked(http2.ErrCodeFlowControl)
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWin += int32(f.Increment)
		blocked := c.blocked
		c.blocked = nil
		for _, st := range blocked {
			st.down.queued = false
			st.pushDown(b)
		}
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.lastID {
			c.goAwayLocked(http2.ErrCodeProtocol)
			return errors.New("WINDOW_UPDATE on an idle stream")
		}
		c.idleFrameLocked()
		return nil
	}
	if int64(st.sendWin)+int64(f.Increment) > 1<<31-1 {
		st.protocolError(http2.ErrCodeFlowControl, b)
		return nil
	}
	st.sendWin += int32(f.Increment)
	st.pushDown(b)
	return nil
}

// onHeaders opens a stream, or ends one with its trailers.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame, b *batch) error {
	id := f.StreamID
	if id%2 == 0 {
		c.goAwayErr(http2.ErrCodeProtocol)
		return errors.New("HEADERS on an even stream")
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		// A stream that depends on itself (RFC 9113, 5.3.1).
		c.streamError(id, http2.ErrCodeProtocol, b)
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		switch {
		case st.up.end:
			st.protocolError(http2.ErrCodeStreamClosed, b)
		case !f.StreamEnded() || len(f.PseudoFields()) > 0:
			st.protocolError(http2.ErrCodeProtocol, b)
		default:
			st.up.trailers = f.Fields
			st.endOfBody(b)
		}
		return nil
	}
	if id <= c.lastID {
		// A stream id below one the client used: an unexpected id,
		// PROTOCOL_ERROR (RFC 9113, 5.1.1), whether or not the stream
		// was once open.
		c.goAwayLocked(http2.ErrCodeProtocol)
		return errors.New("HEADERS on a stream id below the last")
	}
	c.lastID = id
	if c.goingAway || len(c.streams) >= MaxStreams {
		c.idleFrameLocked()
		c.out.mu.Lock()
		c.out.rst(id, http2.ErrCodeRefusedStream)
		c.out.mu.Unlock()
		b.mark(c.out)
		return nil
	}
	st := newStream(c, id, f)
	c.streams[id] = st
	c.busyFrame()
	c.s.open.Add(1)
	switch {
	case f.Truncated:
		// Past MaxHeaderBytes: 431, as on HTTP/1.1, and counted.
		st.answer(outcome.BadRequest, 431, "request header fields too large\n", b)
		return nil
	case st.malformed:
		st.answer(outcome.BadRequest, 400, "malformed request\n", b)
		return nil
	}
	c.pending = append(c.pending, st)
	return nil
}

// admitPending admits the streams the batch just read opened: a stream
// reset in the same batch (the rapid reset) is never admitted.
func (c *conn) admitPending(b *batch) {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for i, st := range pending {
		pending[i] = nil
		st.admit(b)
	}
}

// onData takes a stream's body.
func (c *conn) onData(f *http2.DataFrame, b *batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out.took(&c.recvUsed, f.Length, b)
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.lastID {
			c.goAwayLocked(http2.ErrCodeProtocol)
			return errors.New("DATA on an idle stream")
		}
		c.idleFrameLocked()
		c.out.mu.Lock()
		c.out.rst(f.StreamID, http2.ErrCodeStreamClosed)
		c.out.mu.Unlock()
		b.mark(c.out)
		return nil
	}
	if st.up.end {
		st.protocolError(http2.ErrCodeStreamClosed, b)
		return nil
	}
	if int32(f.Length) > st.recvWin {
		st.protocolError(http2.ErrCodeFlowControl, b)
		return nil
	}
	st.recvWin -= int32(f.Length)
	if f.Length > 0 {
		c.busyFrame()
	} else if !f.StreamEnded() {
		c.idleFrameLocked()
	}
	data := f.Data()
	if pad := uint32(len(data)); pad < f.Length {
		// Padding is the window's too, and nobody's to forward.
		st.credit(f.Length - pad)
		b.mark(c.out)
	}
	st.body(data, f.StreamEnded(), b)
	return nil
}

// onReset ends a stream the client reset.
func (c *conn) onReset(f *http2.RSTStreamFrame, b *batch) error {
	c.mu.Lock()
	st := c.streams[f.StreamID]
	if st == nil {
		idle := f.StreamID > c.lastID
		if !idle {
			c.idleFrameLocked()
		}
		c.mu.Unlock()
		if idle {
			c.goAwayErr(http2.ErrCodeProtocol)
			return errors.New("RST_STREAM on an idle stream")
		}
		return nil
	}
	if !st.headersSent {
		c.chargeReset(1)
	}
	st.clientReset(b)
	c.mu.Unlock()
	return nil
}

// chargeReset charges the budget of premature resets n for a stream reset
// before its answer; mu held, by the reader.
func (c *conn) chargeReset(n float64) {
	held(&c.mu)
	if !c.resets.spend(n, resetBurst, resetRate, time.Now()) {
		c.verdict = "rapid reset"
	}
}

// watchStall starts the stall watch, if it is not running: a stream's
// response waits for the client's window; mu held.
func (c *conn) watchStall() {
	held(&c.mu)
	if c.stallArmed {
		return
	}
	c.stallArmed = true
	if c.progressAt.IsZero() {
		c.progressAt = time.Now()
	}
	d := c.s.cfg.UpstreamTimeout - time.Since(c.progressAt)
	if c.stallTimer == nil {
		c.stallTimer = time.AfterFunc(d, c.stallCheck)
	} else {
		c.stallTimer.Reset(d)
	}
}

// stallCheck ends the connection if a stream's response has waited for
// the client's window, and the client granted none, for UpstreamTimeout:
// a gRPC stream past its headers has no deadline of its own, and would
// hold its reservation, and the connection, for as long as the client
// liked.
func (c *conn) stallCheck() {
	c.mu.Lock()
	c.stallArmed = false
	blocked := false
	for _, st := range c.streams {
		if len(st.down.buf) > 0 && (st.sendWin <= 0 || c.sendWin <= 0) {
			blocked = true
			break
		}
	}
	if !blocked {
		c.mu.Unlock()
		return
	}
	if time.Since(c.progressAt) < c.s.cfg.UpstreamTimeout {
		c.watchStall()
		c.mu.Unlock()
		return
	}
	// The GOAWAY goes in before the reader is woken to tear the
	// connection down, and both under mu (see read).
	c.stalled, c.ended = true, true
	c.goAwayLocked(http2.ErrCodeEnhanceYourCalm)
	_ = c.nc.SetReadDeadline(time.Now())
	c.mu.Unlock()
	c.s.ended(c, "no window granted for UPSTREAM_TIMEOUT")
	c.out.kick()
}

// answered gives back to the budget of resets one for a stream answered;
// mu held.
func (c *conn) answered() {
	held(&c.mu)
	c.resets.left = min(resetBurst, c.resets.left+1)
}

// budget is what a client may still do of something it may do in
// bursts, burst at once and rate more a second: as of at, left.
type budget struct {
	left float64
	at   time.Time
}

// spend takes n from the budget, refilled for the time since it was last
// spent, and reports whether it was not overspent.
func (b *budget) spend(n, burst, rate float64, now time.Time) bool {
	b.left = min(burst, b.left+now.Sub(b.at).Seconds()*rate) - n
	b.at = now
	return b.left >= 0
}

// streamError resets a stream for an error of its client's.
func (c *conn) streamError(id uint32, code http2.ErrCode, b *batch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id > c.lastID && id%2 == 1 {
		c.lastID = id
	}
	if st := c.streams[id]; st != nil {
		st.protocolError(code, b)
		return
	}
	c.idleFrameLocked()
	c.out.mu.Lock()
	c.out.rst(id, code)
	c.out.mu.Unlock()
	b.mark(c.out)
}

// headerTimedOut answers a stream whose header block was not whole within
// HeaderTimeout 408, as on HTTP/1.1, and counts it; the connection ends.
func (c *conn) headerTimedOut(id uint32) {
	c.mu.Lock()
	c.stalled = true // its other streams end client_timeout too
	c.mu.Unlock()
	now := time.Now()
	c.s.gate.Observe(&outcome.Record{Kind: outcome.ClientTimeout, Status: 408, Remote: c.remote, Total: c.s.cfg.HeaderTimeout, End: now})
	c.out.mu.Lock()
	c.out.headers(id, []hpack.HeaderField{{Name: ":status", Value: "408"},
		{Name: strings.ToLower(outcomeHeader), Value: outcome.ClientTimeout.String()}, {Name: "content-length", Value: "0"}}, true)
	c.out.mu.Unlock()
	c.goAwayErr(http2.ErrCodeNo)
}

// calm ends the connection for its conduct.
func (c *conn) calm(reason string) {
	c.s.ended(c, reason)
	c.goAwayErr(http2.ErrCodeEnhanceYourCalm)
}

// goAwayErr sends a GOAWAY that ends the connection.
func (c *conn) goAwayErr(code http2.ErrCode) {
	c.mu.Lock()
	c.goAwayLocked(code)
	c.mu.Unlock()
	c.out.kick()
}

// goAwayLocked appends a GOAWAY; mu held.
func (c *conn) goAwayLocked(code http2.ErrCode) {
	held(&c.mu)
	c.goingAway = true
	c.out.mu.Lock()
	if !c.out.closed {
		_ = c.out.fr.WriteGoAway(c.lastID, code, nil)
	}
	c.out.mu.Unlock()
}

// goAway tells the client the connection is ending (a drain): the
// streams it has open finish, and it closes after the last.
func (c *conn) goAway() {
	c.mu.Lock()
	c.goAwayLocked(http2.ErrCodeNo)
	// Wake the reader, which closes the connection once no stream is
	// left; under mu, as the reader arms its wait.
	_ = c.nc.SetReadDeadline(time.Now())
	c.mu.Unlock()
	c.out.kick()
}

// written is told of what the client's writes did.
func (c *conn) written(ws []written) {
	var b batch
	for _, w := range ws {
		w.s.sent(w, &b)
	}
	b.kick()
}

// teardown ends the connection's streams, once its reads ended.
func (c *conn) teardown(err error) {
	var b batch
	c.mu.Lock()
	away := c.goingAway
	c.goingAway = true
	gone := outcome.ClientClosed
	if c.stalled {
		gone = outcome.ClientTimeout
	}
	for _, st := range c.streams {
		st.connGone(gone, &b)
	}
	c.mu.Unlock()
	b.kick()
	c.out.close()
	select {
	case <-c.out.done:
	case <-time.After(time.Second):
	}
	if err != nil && away && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		// Ended with a GOAWAY while the client was sending: what it
		// sent is read, for a second at most, so that the close does not
		// reset the connection under the GOAWAY before the client reads
		// it.
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.CopyN(io.Discard, c.nc, 1<<20)
	}
	c.nc.Close()
	c.s.forget(c)
}
