package proxy

import (
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
// client may send ahead (streamReceiveWindow).
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
	if room := float64(RequestOverheadBytes - streamReceiveWindow); per > room && !raceEnabled {
		t.Errorf("a stream holds %.0f B besides its body; the %d B an answer reserves cover %.0f beside the %d B window", per, RequestOverheadBytes, room, streamReceiveWindow)
	}
}
