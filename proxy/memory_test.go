package proxy

import (
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// heapAndStacks is the live heap after a full collection plus the stacks in
// use: the Go memory the process holds, without garbage.
func heapAndStacks() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc) + int64(ms.StackInuse)
}

// holdRequests opens n connections to addr, sends one GET for path on
// each, waits until arrived counts n at the upstream and settle has passed,
// and returns the Go memory held per request over the idle state. It then
// releases the upstream and closes the connections unread.
func holdRequests(t *testing.T, addr, path string, n int, arrived *atomic.Int64, settle time.Duration, release func()) float64 {
	t.Helper()
	arrived.Store(0)
	idle := heapAndStacks()
	conns := make([]*net.TCPConn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.TCPConn)
		// A small receive window makes a streamed response stall at once
		// instead of filling megabytes of kernel buffer first.
		conns[i].SetReadBuffer(4 << 10)
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: memory.test\r\n\r\n", path); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for arrived.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the upstream within 20s", arrived.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(settle)
	held := heapAndStacks()
	release()
	for _, c := range conns {
		c.Close()
	}
	return float64(held-idle) / float64(n)
}

// TestRequestOverheadBytes measures what one request costs the proxy in the
// two states in which requests pile up, and checks that
// RequestOverheadBytes, the fixed part of every reservation, covers both:
//
//   - parked: the upstream has the request and has not answered;
//   - streaming: a response too large to buffer is on its way to a client
//     that stopped reading.
//
// The same n requests are held at the same upstream twice, directly and
// through the proxy; the difference per request is the proxy's share: its
// client and upstream connections with their buffers, the handler's
// goroutine and stack, the pooled exchange, fasthttp's request context and,
// when streaming, the copy buffer.
func TestRequestOverheadBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("holds hundreds of connections")
	}
	const n = 200
	var arrived atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	chunk := []byte(strings.Repeat("x", 1<<20))
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/parked":
			arrived.Add(1)
			<-*gate.Load()
			w.Write([]byte("released"))
		case "/streamed":
			arrived.Add(1)
			w.Header().Set("Content-Length", fmt.Sprint(16*len(chunk)))
			for range 16 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.Reserve = RequestBytes
	})
	// One request first, so that what is made once per process (pools,
	// the upstream client's state) is not charged to the measured ones.
	doGet(t, tp.addr, "/warm")

	var largest float64
	for _, tt := range []struct {
		path   string
		settle time.Duration // for a stalled stream to fill the buffers in between
	}{
		{"/parked", 0},
		{"/streamed", 300 * time.Millisecond},
	} {
		hold := func(addr string) float64 {
			ch := make(chan struct{})
			gate.Store(&ch)
			return holdRequests(t, addr, tt.path, n, &arrived, tt.settle, func() { close(ch) })
		}
		direct := hold(strings.TrimPrefix(up.URL, "http://"))
		proxied := hold(tp.addr)
		overhead := proxied - direct
		largest = max(largest, overhead)
		t.Logf("%s: %.0f B per request directly, %.0f B through the proxy: the proxy holds %.1f KiB (RequestOverheadBytes %d KiB)",
			tt.path, direct, proxied, overhead/1024, RequestOverheadBytes>>10)
		if overhead > RequestOverheadBytes && !raceEnabled {
			t.Errorf("%s: the proxy holds %.0f B per request; RequestOverheadBytes = %d does not cover it", tt.path, overhead, RequestOverheadBytes)
		}
	}
	// The race detector's bookkeeping inflates every figure.
	if largest < RequestOverheadBytes/2 && !raceEnabled {
		t.Errorf("the proxy holds at most %.0f B per request; RequestOverheadBytes = %d overstates it twofold and shrinks the bulkhead for nothing", largest, RequestOverheadBytes)
	}
	tp.waitIdle(t)
}
