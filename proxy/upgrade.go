package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/peer"
	"github.com/loomgate/loomgate/internal/tunnel"
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
	t := p.upgrades.New(conn, br, ctx.Conn(), append([]byte(nil), out.Header()...),
		bytes.EqualFold(proto, []byte("websocket")))
	// The place is the tunnel's now, given back when it closes.
	e.upgradePlace = false
	e.req.Record.Status = status
	// The handshake is done: its permit goes back and its Outcome is
	// reported now, whatever the tunnel does next.
	e.finish(e.req.ServedAt)
	client := ctx.Conn()
	p.npending.Add(1)
	p.pending.Store(client, t)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		p.handedOver(client)
		t.Run(c)
	})
}

// handedOver takes the tunnel of client off the pending ones: fasthttp
// handed its connection over.
func (p *Proxy) handedOver(client net.Conn) {
	if _, ok := p.pending.LoadAndDelete(client); ok {
		p.npending.Add(-1)
	}
}

// abandoned ends the tunnel of c, if it has one, whose connection fasthttp
// closed instead of handing it over. Called from connState.
func (p *Proxy) abandoned(c net.Conn) {
	if v, ok := p.pending.LoadAndDelete(c); ok {
		p.npending.Add(-1)
		v.(*tunnel.Tunnel).Abandon()
	}
}

// writeRequest writes req to conn in one write.
func writeRequest(conn net.Conn, req *fasthttp.Request) error {
	bw := bufio.NewWriterSize(conn, 4<<10)
	if err := req.Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// UpgradedStats are the upgraded connections' figures.
type UpgradedStats = tunnel.Stats

// Upgraded describes one upgraded connection when it closes.
type Upgraded = tunnel.Upgraded

// UpgradedStats returns the upgraded connections' figures now.
func (p *Proxy) UpgradedStats() UpgradedStats { return p.upgrades.Stats() }
