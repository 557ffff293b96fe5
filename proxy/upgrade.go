package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/listen"
	"github.com/loomgate/loomgate/internal/peer"
)

// An Upgrade request (WebSocket, or any protocol named in Upgrade) is
// admitted like any request: queue, bulkhead, memory bulkhead and
// UpstreamTimeout apply to its handshake, which ends in one Outcome. It
// goes to the upstream on a connection of its own, outside the pool: once
// the upstream answers 101 that connection is the tunnel's, for as long
// as the upgraded connection lives. The permit is released at the 101,
// as for any request answered: an upgraded connection that idles for
// hours would otherwise hold a worker it does not use, and a fixed pool
// of 200 would be 200 open dashboards. Upgraded connections are bounded
// on their own instead (MaxUpgraded), counted, and timed.

const (
	// closeGrace bounds what a tunnel does once it is told to stop: the
	// rest of a WebSocket frame in flight, then the close frames.
	closeGrace = time.Second
)

// UpgradedStats are the upgraded connections' figures.
type UpgradedStats struct {
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

// upgrades keeps the upgraded connections of a Proxy.
type upgrades struct {
	max  int64 // 0: unbounded
	idle time.Duration
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
	tunnels  map[*tunnel]struct{}
	draining bool
	wg       sync.WaitGroup

	// pending are tunnels whose connection fasthttp has yet to hand over,
	// by client connection: if fasthttp closes it instead, connState
	// ends the tunnel. npending spares every other close the look-up.
	pending  sync.Map
	npending atomic.Int64
}

// reserve takes a place for a handshake, or reports false at the bound or
// while draining.
func (u *upgrades) reserve() bool {
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

// releaseUpgradePlace gives back the upgraded connection's place e holds,
// if it holds one.
func (e *exchange) releaseUpgradePlace() {
	if e.upgradePlace {
		e.upgradePlace = false
		e.p.upgrades.unreserve()
	}
}

// unreserve gives back a place reserve took.
func (u *upgrades) unreserve() {
	if l := u.slots.Load(); l != nil {
		l.Give()
	}
	u.open.Add(-1)
}

// isUpgrade reports whether a request asks to switch protocols: Connection
// names upgrade and Upgrade names a protocol. An upgrade to h2c is not
// one: its HTTP/2 streams would pass the tunnel unadmitted, so such a
// request goes as a plain HTTP/1.1 request (Upgrade is hop-by-hop), as
// RFC 9113 lets a server answer it; h2c clients use prior knowledge.
func isUpgrade(h *fasthttp.RequestHeader) bool {
	if !h.ConnectionUpgrade() {
		return false
	}
	v := h.Peek(fasthttp.HeaderUpgrade)
	return len(v) > 0 && !hasToken(v, "h2c")
}

// hasToken reports whether a comma-separated list has tok, in any case.
func hasToken(list []byte, tok string) bool {
	for len(list) > 0 {
		var t []byte
		t, list, _ = bytes.Cut(list, []byte{','})
		if bytes.EqualFold(bytes.TrimSpace(t), []byte(tok)) {
			return true
		}
	}
	return false
}

// upgrade forwards an admitted Upgrade request on a connection of its own
// and, at a 101, turns the client's connection into a tunnel. The handler
// reserved the upgraded connection's place; every path gives it back but
// the tunnel's, which gives it back when it closes.
func (e *exchange) upgrade(ctx *fasthttp.RequestCtx) {
	p := e.p
	req := &ctx.Request
	proto := bytes.Clone(req.Header.Peek(fasthttp.HeaderUpgrade))
	e.prepareRequest(ctx)
	req.Header.Set(fasthttp.HeaderConnection, "Upgrade")
	req.Header.SetBytesV(fasthttp.HeaderUpgrade, proto)
	req.URI().DisablePathNormalizing = true

	deadline := e.req.AdmittedAt.Add(p.timeout)
	conn, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", p.client.Addr)
	if err != nil {
		e.releaseUpgradePlace()
		e.upstreamFailed(ctx, &ConnectError{Err: err})
		return
	}
	_ = conn.SetDeadline(deadline)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.SetNoDefaultContentType(true)
	br := bufio.NewReaderSize(conn, MaxHeaderBytes)
	err = writeRequest(conn, req)
	for i := 0; err == nil; i++ {
		if err = resp.Header.Read(br); err == nil {
			s := resp.StatusCode()
			if s < 100 || s > 199 || s == fasthttp.StatusSwitchingProtocols {
				break
			}
			if i == maxInterim {
				err = errors.New("proxy: too many informational responses")
			}
		}
	}
	if err == nil && resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
		// Refused (400, 401, 426...): an ordinary answer, passed on whole.
		err = resp.ReadBody(br, intBytes(p.maxBody))
	}
	if err != nil {
		conn.Close()
		e.releaseUpgradePlace()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		e.upstreamFailed(ctx, err)
		return
	}
	e.req.ServedAt = time.Now()
	status := resp.StatusCode()
	e.req.Record.UpstreamStatus = status
	if status == fasthttp.StatusSwitchingProtocols && peer.Peek(ctx.Conn()) != peer.Open {
		// The client closed, half-closed or reset while the upstream
		// worked on its handshake: nobody is there to take the 101, whose
		// write would still succeed into the socket's buffer and count
		// the handshake ok. A half-close is taken as leaving, as for a
		// request not yet forwarded (peer.Gone): a tunnel the client
		// cannot send on is no WebSocket. The upstream's connection is
		// closed, and the request counted client_closed, as a plain one
		// whose client left is. Handshakes are few and each dials a
		// connection of its own: the look costs nothing beside that.
		conn.Close()
		e.releaseUpgradePlace()
		ctx.SetConnectionClose()
		e.respond(ctx, fasthttp.StatusBadRequest, ClientClosed, p.message(ClientClosed))
		return
	}
	out := &ctx.Response.Header
	resp.Header.CopyTo(out)
	e.names = removeHopHeaders(out, e.names)
	out.ResetConnectionClose()
	out.SetNoDefaultContentType(true)
	if status != fasthttp.StatusSwitchingProtocols {
		conn.Close()
		e.releaseUpgradePlace()
		e.addServerTiming(ctx)
		e.buf = append(e.buf[:0], resp.Body()...)
		e.buffered.Reset(e.buf)
		e.body = &e.buffered
		e.handOff(ctx, len(e.buf), status)
		return
	}
	out.Set(fasthttp.HeaderConnection, "Upgrade")
	out.SetBytesV(fasthttp.HeaderUpgrade, resp.Header.Peek(fasthttp.HeaderUpgrade))
	e.addServerTiming(ctx)
	out.SetStatusCode(status)
	_ = conn.SetDeadline(time.Time{})
	t := &tunnel{
		u: &p.upgrades, up: conn, upR: br,
		client:    ctx.Conn(),
		head:      append([]byte(nil), out.Header()...),
		websocket: bytes.EqualFold(proto, []byte("websocket")),
		release:   p.connDone,
		log:       p.log,
	}
	t.stop = make(chan struct{})
	// The place is the tunnel's now, given back when it closes.
	e.upgradePlace = false
	e.req.Record.Status = status
	// The handshake is done: its permit goes back and its Outcome is
	// reported now, whatever the tunnel does next.
	e.finish(e.req.ServedAt)
	p.upgrades.npending.Add(1)
	p.upgrades.pending.Store(t.client, t)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(t.run)
}

// writeRequest writes req to conn in one write.
func writeRequest(conn net.Conn, req *fasthttp.Request) error {
	bw := bufio.NewWriterSize(conn, 4<<10)
	if err := req.Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// abandoned ends a tunnel whose client connection fasthttp closed instead
// of handing it over. Called from connState.
func (u *upgrades) abandoned(c net.Conn) {
	if v, ok := u.pending.LoadAndDelete(c); ok {
		u.npending.Add(-1)
		t := v.(*tunnel)
		t.up.Close()
		u.unreserve()
	}
}

// drain stops admitting handshakes, waits for the tunnels to close by
// themselves until ctx ends, then closes those left: a WebSocket gets a
// close frame (1001, going away) each way first.
func (u *upgrades) drain(ctx context.Context) {
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
func (u *upgrades) stats() UpgradedStats {
	return UpgradedStats{Open: u.open.Load(), FromClient: u.fromClient.Load(), ToClient: u.toClnt.Load()}
}

// UpgradedStats returns the upgraded connections' figures now.
func (p *Proxy) UpgradedStats() UpgradedStats { return p.upgrades.stats() }

// tunnel relays an upgraded connection both ways.
type tunnel struct {
	u      *upgrades
	up     net.Conn      // the upstream connection
	upR    *bufio.Reader // up, with what arrived after the 101
	client net.Conn      // the client's connection itself, for deadlines
	head   []byte        // the 101 to write to the client
	// websocket is set when the protocol is WebSocket: frames are then
	// followed so that a stop can close at a frame's boundary.
	websocket bool
	release   func()
	log       interface{ Debug(string, ...any) }

	stopOnce sync.Once
	stop     chan struct{}
	stopping atomic.Bool
	// last is when a byte last went either way (UnixNano).
	last atomic.Int64
}

// end tells the tunnel to stop.
func (t *tunnel) end() {
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

// run is the hijack handler: it writes the 101 and relays until either
// side closes, the tunnel idles past the idle timeout, or a drain ends it.
func (t *tunnel) run(c net.Conn) {
	u := t.u
	if _, ok := u.pending.LoadAndDelete(t.client); ok {
		u.npending.Add(-1)
	}
	start := time.Now()
	u.mu.Lock()
	if u.tunnels == nil {
		u.tunnels = make(map[*tunnel]struct{})
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
		u.unreserve()
		u.wg.Done()
		t.release()
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
func (t *tunnel) after(err error, src net.Conn) {
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
func (t *tunnel) pipe(dst net.Conn, src io.Reader, srcConn net.Conn, frames *wsFrames, counted *atomic.Uint64) (int64, error) {
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
		case !isTimeout(err):
			return n, err
		case t.stopping.Load():
			if grace {
				return n, errStopped // the frame did not come in time
			}
		case idle > 0 && time.Since(time.Unix(0, t.last.Load())) < idle:
			// The other direction is busy: the tunnel is not idle.
		case idle > 0:
			t.log.Debug("upgraded connection idle; closing", "idle", idle)
			t.end()
		default:
			return n, err
		}
	}
}

var errStopped = errors.New("proxy: tunnel stopped")

// closeFrames sends each side a WebSocket close frame, 1001 going away,
// when its direction stopped at a frame's boundary (otherwise the frame
// would corrupt the stream, and the connection is just closed).
func (t *tunnel) closeFrames(fromClient, toClient *wsFrames) {
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
