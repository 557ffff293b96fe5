package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/loomgate/loomgate/limiter"
)

// wsEcho is an upstream that echoes every WebSocket message, and records
// how each of its connections ended.
type wsEcho struct {
	*upstream
	mu     sync.Mutex
	closes []error // each connection's last Read error
	ended  chan struct{}
}

func newWSEcho(t *testing.T) *wsEcho {
	w := &wsEcho{ended: make(chan struct{}, 100)}
	w.upstream = newUpstream(t, func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			rw.Write([]byte("plain"))
			return
		}
		if r.URL.Path == "/refuse" {
			http.Error(rw, "no upgrade here", http.StatusForbidden)
			return
		}
		c, err := websocket.Accept(rw, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, msg, err := c.Read(context.Background())
			if err != nil {
				w.mu.Lock()
				w.closes = append(w.closes, err)
				w.mu.Unlock()
				w.ended <- struct{}{}
				return
			}
			if err := c.Write(context.Background(), typ, msg); err != nil {
				return
			}
		}
	})
	return w
}

func wsDial(t *testing.T, addr, path string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+addr+path, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if resp.Header.Get("Server-Timing") == "" {
		t.Errorf("101 without Server-Timing: %v", resp.Header)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(1 << 20)
	return c
}

func echo(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	_, got, err := c.Read(ctx)
	if err != nil || string(got) != msg {
		t.Fatalf("read = %q, %v; want %q", got, err, msg)
	}
}

// TestWebSocketThroughProxy: in both modes, messages go both ways through
// the proxy; the handshake is one Outcome, its permit is back at the 101
// (so a fixed pool of one still serves a request while the WebSocket is
// open), and the bytes and the open count are measured.
func TestWebSocketThroughProxy(t *testing.T) {
	for _, lcfg := range []limiter.Config{
		{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Second},
		{Mode: limiter.Unbounded},
	} {
		t.Run(lcfg.Mode.String(), func(t *testing.T) {
			up := newWSEcho(t)
			var closed sync.WaitGroup
			closed.Add(1)
			var life Upgraded
			tp := startProxy(t, up.URL, lcfg, func(c *Config) {
				c.UpgradedClosed = func(u Upgraded) { life = u; closed.Done() }
			})
			c := wsDial(t, tp.addr, "/ws")
			big := strings.Repeat("x", 200<<10)
			for _, msg := range []string{"hello", big, "again"} {
				echo(t, c, msg)
			}
			outs := tp.rec.wait(t, 1)
			if o := outs[0]; o.Kind != OK || o.Status != 101 || o.UpstreamStatus != 101 || !o.Admitted {
				t.Errorf("handshake outcome = %+v; want ok 101 admitted", o)
			}
			tp.waitIdle(t) // the permit went back at the 101
			if resp, body := doGet(t, tp.addr, "/plain"); resp.StatusCode != 200 || body != "plain" {
				t.Errorf("request beside the WebSocket = %d %q", resp.StatusCode, body)
			}
			if st := tp.proxy.UpgradedStats(); st.Open != 1 || st.FromClient < 200<<10 || st.ToClient < 200<<10 {
				t.Errorf("stats = %+v; want 1 open and over 200 KiB each way", st)
			}
			c.Close(websocket.StatusNormalClosure, "bye")
			closed.Wait()
			if !life.WebSocket || life.Life <= 0 || life.FromClient < 200<<10 {
				t.Errorf("closed = %+v", life)
			}
			if st := tp.proxy.UpgradedStats(); st.Open != 0 {
				t.Errorf("open after close = %d", st.Open)
			}
		})
	}
}

// TestUpgradeRefused: an upstream that does not switch answers as usual.
func TestUpgradeRefused(t *testing.T) {
	up := newWSEcho(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+tp.addr+"/refuse", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("dial = %v, %v; want the upstream's 403", resp, err)
	}
	if o := tp.rec.wait(t, 1)[0]; o.Kind != OK || o.UpstreamStatus != 403 {
		t.Errorf("outcome = %+v", o)
	}
	tp.waitIdle(t)
	if st := tp.proxy.UpgradedStats(); st.Open != 0 {
		t.Errorf("open = %d after a refusal", st.Open)
	}
}

// TestMaxUpgraded: beyond the bound a handshake is rejected like any
// rejection, with Retry-After and Loomgate-Outcome; a place comes back
// when a connection closes.
func TestMaxUpgraded(t *testing.T) {
	up := newWSEcho(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.MaxUpgraded = 1 })
	c := wsDial(t, tp.addr, "/ws")
	echo(t, c, "one")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+tp.addr+"/ws", nil)
	if err == nil || resp == nil || resp.StatusCode != 503 ||
		resp.Header.Get("Loomgate-Outcome") != "rejected_upgraded" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second handshake = %v, %v; want 503 rejected_upgraded with Retry-After", resp, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for tp.proxy.UpgradedStats().Open != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first connection's place did not come back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	echo(t, wsDial(t, tp.addr, "/ws"), "three")
}

// TestUpgradedDrain: Shutdown gives open WebSockets until its context
// ends, then sends each side a close frame, 1001 going away; no handshake
// is admitted meanwhile.
func TestUpgradedDrain(t *testing.T) {
	up := newWSEcho(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, nil)
	c := wsDial(t, tp.addr, "/ws")
	echo(t, c, "before")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- tp.proxy.Shutdown(ctx) }()
	echo(t, c, "during the drain") // still relayed
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	_, _, err := c.Read(rctx)
	if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
		t.Errorf("client read after the drain = %v; want close 1001", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("closed after %v; want the drain's 300ms", d)
	}
	select {
	case <-up.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream's connection did not end")
	}
	up.mu.Lock()
	if s := websocket.CloseStatus(up.closes[0]); s != websocket.StatusGoingAway {
		t.Errorf("upstream read after the drain = %v; want close 1001", up.closes[0])
	}
	up.mu.Unlock()
	if err := <-shut; err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v", err)
	}
}

// TestUpgradedIdle: a tunnel that carries nothing for the idle timeout is
// closed, with close frames.
func TestUpgradedIdle(t *testing.T) {
	up := newWSEcho(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.UpgradedIdleTimeout = 200 * time.Millisecond
	})
	c := wsDial(t, tp.addr, "/ws")
	for range 4 { // traffic keeps it open past the timeout
		echo(t, c, "busy")
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err := c.Read(ctx)
	if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
		t.Errorf("read = %v; want close 1001", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closed after %v; want about 200ms", d)
	}
}

// TestUpgradeQueues: a handshake waits for a permit like any request, and
// the client connection's place comes back when the tunnel closes.
func TestUpgradeQueues(t *testing.T) {
	up := newWSEcho(t)
	slow := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			time.Sleep(300 * time.Millisecond)
			return
		}
		up.srv.Handler.ServeHTTP(w, r)
	})
	tp := startProxy(t, slow.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: 5 * time.Second}, nil)
	go doGet(t, tp.addr, "/slow")
	for tp.limiter.Stats().InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	c := wsDial(t, tp.addr, "/ws")
	echo(t, c, "after the queue")
	var hs Outcome
	for _, o := range tp.rec.wait(t, 2) {
		if o.Status == 101 {
			hs = o
		}
	}
	if hs.Queue < 200*time.Millisecond {
		t.Errorf("handshake queued %v; want most of the 300ms the slow request held the permit", hs.Queue)
	}
	c.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	// The slow GET's connection stays open, kept alive.
	for tp.proxy.ClientConns() != 1 || tp.proxy.UpgradedStats().Open != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("client connections %d, upgraded %d; want 1 and 0", tp.proxy.ClientConns(), tp.proxy.UpgradedStats().Open)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestUpgradeToH2CIsPlain: an HTTP/1.1 upgrade to h2c goes as a plain
// request, without Upgrade: a tunnel would let HTTP/2 streams past
// admission.
func TestUpgradeToH2CIsPlain(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("upgrade=" + r.Header.Get("Upgrade")))
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, nil)
	resp, body := dial(t, tp.addr).roundTrip(t, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
	if resp.StatusCode != 200 || body != "upgrade=" {
		t.Errorf("got %d %q; want the plain answer, no Upgrade upstream", resp.StatusCode, body)
	}
}

// TestUpgradeUpstreamDown: a handshake whose upstream is unreachable is
// 502 upstream_error, and its reserved place comes back.
func TestUpgradeUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tp := startProxy(t, "http://"+addr, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.MaxUpgraded = 1 })
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, resp, err := websocket.Dial(ctx, "ws://"+tp.addr+"/ws", nil)
		cancel()
		if err == nil || resp == nil || resp.StatusCode != 502 || resp.Header.Get("Loomgate-Outcome") != "upstream_error" {
			t.Fatalf("dial = %v, %v; want 502 upstream_error", resp, err)
		}
	}
	if st := tp.proxy.UpgradedStats(); st.Open != 0 {
		t.Errorf("open = %d; want 0", st.Open)
	}
	var ce *ConnectError
	if o := tp.rec.wait(t, 2)[0]; !errors.As(o.UpstreamErr, &ce) {
		t.Errorf("outcome's UpstreamErr = %v; want a *ConnectError", o.UpstreamErr)
	}
	tp.waitIdle(t)
}

// TestUnaskedUpgradeIsTheUpstreams: an upstream that answers 101 to a
// request that asked for no upgrade. Passed on, the client would wait on a
// protocol it never asked for; it gets 502, counted against the upstream,
// and the connection is not pooled.
func TestUnaskedUpgradeIsTheUpstreams(t *testing.T) {
	up := newConnUpstream(t, func(u *connUpstream, c net.Conn, br *bufio.Reader) {
		if u.next(br) {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			time.Sleep(time.Second)
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	c := dial(t, tp.addr)
	c.SetDeadline(time.Now().Add(3 * time.Second))
	resp, _ := c.roundTrip(t, get("/plain"))
	if resp.StatusCode != 502 {
		t.Errorf("GET answered 101 by the upstream: %d; want 502", resp.StatusCode)
	}
	if o := tp.rec.wait(t, 1)[0]; o.Kind != UpstreamError || o.UpstreamStatus != 0 {
		t.Errorf("counted %v (upstream status %d); want upstream_error", o.Kind, o.UpstreamStatus)
	}
	tp.waitIdle(t)
}

// TestUpgradedConnectionsCountAgainstMaxClientConns: an upgraded
// connection holds a second descriptor, its own upstream connection, which
// the client connections' bound counts too: a bound of 3 is one tunnel (2)
// and one more client, whose handshake is refused for want of a
// descriptor, as at MaxUpgraded. Unbounded by that count, ten thousand
// WebSockets under a bound of 19916 took all 20000 of the process's
// descriptors, its admin port's included.
func TestUpgradedConnectionsCountAgainstMaxClientConns(t *testing.T) {
	up := newWSEcho(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.MaxClientConns = 3 })
	c := wsDial(t, tp.addr, "/ws")
	echo(t, c, "one")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+tp.addr+"/ws", nil)
	if err == nil || resp == nil || resp.StatusCode != 503 || resp.Header.Get("Loomgate-Outcome") != "rejected_upgraded" {
		t.Fatalf("second handshake = %v, %v; want 503 rejected_upgraded", resp, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	// Both of the tunnel's slots come back: its upstream connection's
	// and its client's (the refused client's may stay open).
	waitFor(t, func() bool { return tp.proxy.UpgradedStats().Open == 0 && tp.proxy.ClientConns() <= 1 })
	echo(t, wsDial(t, tp.addr, "/ws"), "three")
}

// TestUpgradeClientLeftBeforeThe101: a handshake whose client closes, or
// resets, 150 ms in while the upstream takes 600 ms to agree. The 101 was
// written into the departed client's socket and the handshake counted ok
// with status 101; a plain request whose client leaves so is
// client_closed. It is client_closed too now, the upstream's connection is
// closed rather than relayed for nobody, and the upgraded place comes back.
func TestUpgradeClientLeftBeforeThe101(t *testing.T) {
	upEnded := make(chan struct{}, 2)
	up := newConnUpstream(t, func(u *connUpstream, c net.Conn, br *bufio.Reader) {
		if u.next(br) {
			time.Sleep(600 * time.Millisecond)
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			io.Copy(io.Discard, c)
			upEnded <- struct{}{}
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.MaxUpgraded = 1
		c.Logger = discardLogger()
	})
	for i, reset := range []bool{false, true} {
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		time.Sleep(150 * time.Millisecond)
		if reset {
			c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
		o := tp.rec.wait(t, i+1)[i]
		if o.Kind != ClientClosed || o.Status != StatusClientClosed || o.UpstreamStatus != 101 {
			t.Errorf("reset=%v: counted %v %d (upstream %d); want client_closed 499 (upstream 101)",
				reset, o.Kind, o.Status, o.UpstreamStatus)
		}
		select {
		case <-upEnded:
		case <-time.After(3 * time.Second):
			t.Errorf("reset=%v: the upstream's connection still open 3 s on; want it closed", reset)
		}
		waitFor(t, func() bool { return tp.proxy.UpgradedStats().Open == 0 })
	}
	tp.waitIdle(t)
}

// TestUpgradePlaceComesBackWhenTheHandshakeEndsEarly: a handshake admitted
// after "Expect: 100-continue" whose client then leaves never reaches the
// upstream; the upgraded connection's place it reserved (and its second
// descriptor's slot) comes back. Kept, each such handshake shrank
// MaxUpgraded and MaxClientConns for good, until none was admitted.
func TestUpgradePlaceComesBackWhenTheHandshakeEndsEarly(t *testing.T) {
	up := newWSEcho(t)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.MaxUpgraded = 1
		c.MaxClientConns = 4
		c.Logger = discardLogger()
	})
	for i := range 3 {
		c := dial(t, tp.addr)
		io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
			"Expect: 100-continue\r\nContent-Length: 10\r\n\r\n")
		if status, timedOut := readInterim(t, c, c.r, 5*time.Second); timedOut || !strings.Contains(status, " 100 ") {
			t.Fatalf("got %q (timed out %v); want 100 Continue", status, timedOut)
		}
		c.Close()
		// The place comes back once the proxy has seen the client leave.
		tp.rec.wait(t, i+1)
		waitFor(t, func() bool { return tp.proxy.UpgradedStats().Open == 0 })
	}
	waitFor(t, func() bool { return tp.proxy.ClientConns() == 0 })
	echo(t, wsDial(t, tp.addr, "/ws"), "after")
}
