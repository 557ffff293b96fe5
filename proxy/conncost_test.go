package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/loomgate/loomgate/internal/h2c"
	"github.com/loomgate/loomgate/limiter"
)

// dialHeld opens n connections to addr, writes first(i) on the i-th and
// calls then, if not nil, on it, and returns them.
func dialHeld(t *testing.T, addr string, n int, first func(i int) []byte, then func(net.Conn)) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		if b := first(i); len(b) > 0 {
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if then != nil {
			then(c)
		}
	}
	return conns
}

// h2Open is what a client speaking HTTP/2 with prior knowledge sends
// first: the preface and its SETTINGS, then GETs of path/0, path/1 … on
// streams 1, 3 ….
func h2Open(streams int, path string) []byte {
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range streams {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "cost.test"}, {":path", fmt.Sprintf("%s/%d", path, i)}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	}
	return buf.Bytes()
}

// memoryHeld is the Go memory held per unit while hold's units are held
// (as heapAndStacks counts it, over the state before), once ready
// reports them all in place and settle has passed; the connections hold
// made are closed after.
func memoryHeld(t *testing.T, units int, settle time.Duration, hold func() []net.Conn, ready func() bool) float64 {
	t.Helper()
	before := heapAndStacks()
	conns := hold()
	deadline := time.Now().Add(20 * time.Second)
	for ready != nil && !ready() {
		if time.Now().After(deadline) {
			t.Fatal("not in place within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(settle)
	after := heapAndStacks()
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(300 * time.Millisecond)
	return float64(after-before) / float64(units)
}

// holdingUpstream is an h2c upstream that holds /held/… until the test
// ends, and answers the rest at once.
func holdingUpstream(t *testing.T, arrived *atomic.Int64) string {
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	return h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/held/") {
			arrived.Add(1)
			<-gate
		}
		w.Write([]byte("ok"))
	})
}

// TestH2CStreamStateBytes measures what an HTTP/2 stream waiting for
// admission costs the proxy outside its reservation (Go's stream state,
// the request, the handler's goroutine): 1,000 streams on 10 connections,
// queued behind a worker held at the upstream. A stream answered by the
// proxy costs the same while its body waits, and reserves
// RequestOverheadBytes for it: that must cover its state and the body the
// client may send ahead (h2c.StreamReceiveWindow).
func TestH2CStreamStateBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a thousand streams")
	}
	var arrived atomic.Int64
	tp := startProxy(t, holdingUpstream(t, &arrived), limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 100000, QueueTimeout: time.Minute}, func(c *Config) {
		c.Reserve = RequestBytes
		c.Logger = discardLogger()
	})
	// A connection and a stream first: the upstream connection, pools and
	// the worker held are not the streams'.
	warm := dialHeld(t, tp.addr, 1, func(int) []byte { return h2Open(1, "/held") }, nil)
	defer warm[0].Close()
	waitFor(t, func() bool { return arrived.Load() == 1 })
	const conns, streams = 10, 100
	q := tp.limiter.Stats().Queued
	per := memoryHeld(t, conns*streams, 300*time.Millisecond, func() []net.Conn {
		return dialHeld(t, tp.addr, conns, func(int) []byte { return h2Open(streams, "/queued") }, nil)
	}, func() bool { return tp.limiter.Stats().Queued >= q+conns*streams })
	t.Logf("an HTTP/2 stream waiting for admission: %.0f B outside its reservation (with a hundredth of its connection)", per)
	if room := float64(RequestOverheadBytes - h2c.StreamReceiveWindow); per > room && !raceEnabled {
		t.Errorf("a stream holds %.0f B besides its body; the %d B an answer reserves cover %.0f beside the %d B window", per, RequestOverheadBytes, room, h2c.StreamReceiveWindow)
	}
}

// TestClientConnBytes measures what a client connection costs the proxy
// outside any reservation, in each state a flood of them can hold: open
// and silent, kept alive after a request, with its request waiting in the
// queue (whose bytes the queue does not reserve), and HTTP/2 with no
// stream. The same n connections are held against a bare listener and
// against the proxy; the difference per connection is the proxy's, which
// ClientConnBytes must cover: LOOMGATE_MAX_CONNS=auto divides memory by
// it.
func TestClientConnBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("holds hundreds of connections")
	}
	const n = 300
	var arrived atomic.Int64
	up := holdingUpstream(t, &arrived)
	queued := startProxy(t, up, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 100000, QueueTimeout: time.Minute}, func(c *Config) {
		c.Reserve = RequestBytes
		c.Logger = discardLogger()
	})
	open := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.Reserve = RequestBytes
		c.Logger = discardLogger()
	})
	// What is made once (pools, the upstream's connections) first: a
	// request through each, and one held, so that the queue's requests
	// wait behind it.
	doGet(t, open.addr, "/warm")
	doGet(t, queued.addr, "/warm")
	held := dial(t, queued.addr)
	held.Write([]byte(get("/held/0")))
	waitFor(t, func() bool { return arrived.Load() == 1 })

	bare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	var accepted []net.Conn
	go func() {
		for {
			c, err := bare.Accept()
			if err != nil {
				return
			}
			accepted = append(accepted, c)
		}
	}()
	silent := func(int) []byte { return nil }
	base := memoryHeld(t, n, 300*time.Millisecond, func() []net.Conn { return dialHeld(t, bare.Addr().String(), n, silent, nil) }, nil)
	readAnswer := func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		http.ReadResponse(bufio.NewReader(c), nil)
	}
	var largest float64
	for _, tt := range []struct {
		name  string
		p     *testProxy
		first func(int) []byte
		// then is called on each connection once written to; ready
		// reports them all in their state.
		then  func(net.Conn)
		ready func() bool
	}{
		{"HTTP/1.1, silent", open, silent, nil, func() bool { return open.proxy.ClientConns() >= n }},
		// One at a time, so that the upstream pool keeps one connection.
		{"HTTP/1.1, kept alive", open, func(int) []byte { return []byte(get("/warm")) }, readAnswer, nil},
		{"HTTP/1.1, request queued", queued, func(int) []byte { return []byte(get("/queued")) }, nil,
			func() bool { return queued.limiter.Stats().Queued >= n }},
		{"HTTP/2, no stream", open, func(int) []byte { return h2Open(0, "") }, nil, nil},
	} {
		for queued.limiter.Stats().Queued > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		got := memoryHeld(t, n, 500*time.Millisecond, func() []net.Conn { return dialHeld(t, tt.p.addr, n, tt.first, tt.then) }, tt.ready) - base
		largest = max(largest, got)
		t.Logf("%s: %.0f B a connection (ClientConnBytes %d)", tt.name, got, ClientConnBytes)
		if got > ClientConnBytes && !raceEnabled {
			t.Errorf("%s: %.0f B a connection; ClientConnBytes = %d does not cover it", tt.name, got, ClientConnBytes)
		}
	}
	if largest < ClientConnBytes/2 && !raceEnabled {
		t.Errorf("a connection costs at most %.0f B; ClientConnBytes = %d overstates it twofold, and bounds connections for nothing", largest, ClientConnBytes)
	}
}
