// Package upstreamtest serves, on loopback for a test's duration, the kind
// of service loomgate stands in front of, in small: a pool of workers the
// sidecar cannot see, each request holding one for its service time, and
// memory held per request that the service reports on /metrics. It is the
// product's tests' upstream, for the sidecar's own tests and the commands'
// alike; the lab's stub, which does much more, stays in the lab.
package upstreamtest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// HeldBytesMetric is the gauge the upstream's /metrics reports: the bytes
// that requests in flight hold (kb=), exactly, as a JVM's heap in use after
// collection is, where the process's resident memory would count the
// garbage collector's headroom too.
const HeldBytesMetric = "upstream_held_bytes"

// pageSize is the stride at which held memory is written: one byte a page
// makes the kernel back the whole buffer.
const pageSize = 4096

// HiddenPool serves an upstream with a pool of size workers (none if size
// is 0), each request holding one for its service time, as a servlet
// container's thread pool does. It answers "ok" on every path but /metrics.
//
// A request's query may set its service time in milliseconds (ms=N, else
// service) and memory to hold meanwhile in KiB (kb=N, written to every
// page so that it is resident). /metrics takes no worker and reports
// HeldBytesMetric in the text exposition format.
//
// It returns the upstream's base URL and shuts it down when the test ends.
func HiddenPool(t testing.TB, size int, service time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var workers chan struct{}
	if size > 0 {
		workers = make(chan struct{}, size)
	}
	var held atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprintf(w, "# TYPE %s gauge\n%s %d\n", HeldBytesMetric, HeldBytesMetric, held.Load())
			return
		}
		q := r.URL.Query()
		d, kb := service, 0
		if v := q.Get("ms"); v != "" {
			ms, err := strconv.Atoi(v)
			if err != nil || ms < 0 {
				http.Error(w, "ms: want whole milliseconds", http.StatusBadRequest)
				return
			}
			d = time.Duration(ms) * time.Millisecond
		}
		if v := q.Get("kb"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, "kb: want whole KiB", http.StatusBadRequest)
				return
			}
			kb = n
		}
		if workers != nil {
			workers <- struct{}{}
			defer func() { <-workers }()
		}
		buf := make([]byte, kb<<10)
		for i := 0; i < len(buf); i += pageSize {
			buf[i] = 1
		}
		held.Add(int64(len(buf)))
		time.Sleep(d)
		// Held, not only counted: the collector may not take it early.
		runtime.KeepAlive(buf)
		held.Add(-int64(len(buf)))
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
