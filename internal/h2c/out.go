package h2c

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// out is one connection's output, either side's. Frames are appended to
// a buffer under mu, from whichever goroutine has them (the connection's
// own reader, the other side's, a stream's timer), and one goroutine of
// the connection's writes the buffer: a peer that stops reading holds up
// nothing but its own connection, and what many streams have to send at
// once goes out in one write. What the buffer may hold is bounded by the
// peer's flow-control windows for DATA, and by maxControlBytes for the
// rest.
type out struct {
	mu  sync.Mutex
	buf []byte
	// writing is the length of the buffer being written, which the
	// writer took from buf: what is owed the peer is both.
	writing int
	// over is set once what is owed the peer passed maxOwedBytes (see
	// full): a connection's reader looks at it after each frame.
	over atomic.Bool
	// after is told of what the buffer's frames did once they are
	// written: a relay gives back the window of the bytes it forwarded
	// only once they left, so that a peer that does not read holds up
	// its sender, not the relay's memory.
	after []written
	// spare buffers, swapped with buf and after at each write.
	spareBuf   []byte
	spareAfter []written
	fr         *http2.Framer
	enc        *hpack.Encoder
	hbuf       bytes.Buffer
	// maxFrame is the largest frame the peer takes.
	maxFrame uint32
	// kicked is set while the writer has been told of the buffer.
	kicked bool
	closed bool
	wake   chan struct{}
	// done is closed once the writer stops.
	done chan struct{}
	nc   net.Conn
	// stall bounds each write: a peer that takes nothing of it for that
	// long is gone, or means harm.
	stall time.Duration
	// failed is told once of the first write that fails.
	failed func(error)
}

// written is what a write did for a stream: n bytes of its DATA went out
// (toClient tells which way), or with end its last frame.
type written struct {
	s        *stream
	n        int32
	toClient bool
	end      bool
}

// maxControlBytes bounds what the frames that no window bounds (PING and
// SETTINGS acknowledgements, WINDOW_UPDATE, RST_STREAM, headers) may hold
// of a connection's output while its peer reads nothing: past it and the
// most DATA the windows let it hold, maxOwedBytes in all (9 MiB), the
// peer means harm. What is owed counts the buffer being written as well
// as the one being filled, and is looked at as each frame is appended.
const (
	maxControlBytes = 1 << 20
	maxOwedBytes    = maxControlBytes + MaxStreams*upstreamStreamBuffer
)

func newOut(nc net.Conn, stall time.Duration, failed func(error)) *out {
	o := &out{nc: nc, stall: stall, failed: failed, maxFrame: 16 << 10, wake: make(chan struct{}, 1), done: make(chan struct{})}
	o.fr = http2.NewFramer((*outBuf)(o), nil)
	o.enc = hpack.NewEncoder(&o.hbuf)
	return o
}

// outBuf is the Framer's writer: the buffer, mu held.
type outBuf out

func (b *outBuf) Write(p []byte) (int, error) {
	held(&b.mu)
	b.buf = append(b.buf, p...)
	if len(b.buf)+b.writing > maxOwedBytes {
		b.over.Store(true)
	}
	return len(p), nil
}

// kick tells the writer the buffer has frames. A reader that reads a
// batch of frames kicks once it has read them all (see batch).
func (o *out) kick() {
	o.mu.Lock()
	k := !o.kicked && len(o.buf) > 0
	o.kicked = o.kicked || k
	o.mu.Unlock()
	if k {
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

// close stops the writer once the buffer is written; frames appended
// after are dropped.
func (o *out) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// run writes the buffer until close, or the first failed write; done is
// told of what each write did.
func (o *out) run(done func([]written)) {
	defer close(o.done)
	for range o.wake {
		for {
			o.mu.Lock()
			b, after := o.buf, o.after
			o.buf, o.after = o.spareBuf[:0], o.spareAfter[:0]
			o.spareBuf, o.spareAfter = nil, nil
			o.kicked = false
			o.writing = len(b)
			closed := o.closed
			if len(b) == 0 {
				o.spareBuf, o.spareAfter = b, after[:0]
				o.mu.Unlock()
				if closed {
					return
				}
				break
			}
			o.mu.Unlock()
			stall := o.stall
			if closed {
				// The connection's last words: a peer gets a second.
				stall = min(stall, time.Second)
			}
			_ = o.nc.SetWriteDeadline(time.Now().Add(stall))
			_, err := o.nc.Write(b)
			if err != nil {
				o.mu.Lock()
				o.closed = true
				o.buf, o.after = nil, nil
				o.mu.Unlock()
				o.failed(err)
				return
			}
			if len(after) > 0 {
				done(after)
			}
			clear(after)
			o.recycle(b, after)
		}
	}
}

// keptBytes is the most of a buffer a connection with no stream open
// keeps (see shrink): a frame's worth. A busy one keeps what its bursts
// grew, up to maxKeptBytes, for the next: dropping it between bursts
// costs a streaming call a third more CPU, and growing it again from
// nothing at each burst past the bound allocated twice what the stream
// carried (BenchmarkH2CStream at a 64 KiB bound).
const (
	keptBytes    = 16 << 10
	maxKeptBytes = 256 << 10
)

// grown reports whether shrink would drop a buffer.
func (o *out) grown() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return cap(o.buf) > keptBytes || cap(o.spareBuf) > keptBytes
}

// shrink drops buffers grown past keptBytes, when the connection has had
// no stream open for a while and may stay so for long.
func (o *out) shrink() {
	o.mu.Lock()
	if len(o.buf) == 0 && cap(o.buf) > keptBytes {
		o.buf = nil
	}
	if cap(o.spareBuf) > keptBytes {
		o.spareBuf = nil
	}
	o.mu.Unlock()
}

// recycle keeps b and after for the next write, unless b grew past
// maxKeptBytes.
func (o *out) recycle(b []byte, after []written) {
	if cap(b) > maxKeptBytes {
		b = nil
	}
	o.mu.Lock()
	o.spareBuf, o.spareAfter = b[:0], after[:0]
	o.writing = 0
	o.mu.Unlock()
}

// headers appends a header block, split into CONTINUATION frames as the
// peer's frame size needs; mu held.
func (o *out) headers(id uint32, fields []hpack.HeaderField, end bool) {
	held(&o.mu)
	if o.closed {
		return
	}
	o.hbuf.Reset()
	for _, f := range fields {
		_ = o.enc.WriteField(f)
	}
	block := o.hbuf.Bytes()
	n := min(len(block), int(o.maxFrame))
	_ = o.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:n], EndStream: end, EndHeaders: n == len(block)})
	for block = block[n:]; len(block) > 0; block = block[n:] {
		n = min(len(block), int(o.maxFrame))
		_ = o.fr.WriteContinuation(id, n == len(block), block[:n])
	}
}

// data appends DATA frames carrying p, the last with END_STREAM if end;
// mu held.
func (o *out) data(id uint32, p []byte, end bool) {
	held(&o.mu)
	if o.closed {
		return
	}
	for {
		n := min(len(p), int(o.maxFrame))
		last := n == len(p)
		_ = o.fr.WriteData(id, end && last, p[:n])
		if last {
			return
		}
		p = p[n:]
	}
}

// note asks the writer to tell of w once what precedes it is written;
// mu held.
func (o *out) note(w written) {
	held(&o.mu)
	if !o.closed {
		o.after = append(o.after, w)
	}
}

// rst appends a RST_STREAM; mu held.
func (o *out) rst(id uint32, code http2.ErrCode) {
	held(&o.mu)
	if !o.closed {
		_ = o.fr.WriteRSTStream(id, code)
	}
}

// took counts n bytes the peer sent on the connection, and gives its
// window back once half of it is used: what a connection holds is bounded
// by its streams' windows, the connection's is never the bound. used is
// the count, guarded by the connection's own lock.
func (o *out) took(used *uint32, n uint32, b *batch) {
	if *used += n; *used < connWindow/2 {
		return
	}
	o.mu.Lock()
	o.windowUpdate(0, *used)
	o.mu.Unlock()
	*used = 0
	b.mark(o)
}

// windowUpdate appends a WINDOW_UPDATE; mu held.
func (o *out) windowUpdate(id, n uint32) {
	held(&o.mu)
	if !o.closed && n > 0 {
		_ = o.fr.WriteWindowUpdate(id, n)
	}
}

// batch is the connections a reader appended to while it read a batch of
// frames: it kicks their writers once, when it has no more to read. It is
// also the streams that ended meanwhile, whose records go to admission
// (the observer: metrics, advice, access log) once no lock is held: an
// upstream connection's reader takes each client's lock in turn, and an
// observer slow under one client's lock (a log pipe that is full) held
// up every client whose responses came on that connection.
type batch struct {
	outs  []*out
	ended []*stream
}

func (b *batch) mark(o *out) {
	if b == nil {
		o.kick()
		return
	}
	for _, x := range b.outs {
		if x == o {
			return
		}
	}
	b.outs = append(b.outs, o)
}

// kick wakes the writers, then finishes the streams that ended; no lock
// held.
func (b *batch) kick() {
	for _, o := range b.outs {
		o.kick()
	}
	clear(b.outs)
	b.outs = b.outs[:0]
	b.finish()
}

// finish hands the records of the streams that ended to admission; no
// lock held.
func (b *batch) finish() {
	for i, st := range b.ended {
		h := st.c.s
		h.gate.Finish(&st.req, st.endAt)
		h.open.Add(-1)
		b.ended[i] = nil
	}
	b.ended = b.ended[:0]
}
