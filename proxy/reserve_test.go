package proxy

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/limiter"
)

func TestRequestBytes(t *testing.T) {
	for _, tt := range []struct {
		contentLength int
		want          int64
	}{
		{0, RequestOverheadBytes},
		{100, RequestOverheadBytes + 100},
		{-1, RequestOverheadBytes + UnknownBodyBytes},
		{16 << 20, RequestOverheadBytes + 16<<20},
	} {
		if got := RequestBytes(tt.contentLength); got != tt.want {
			t.Errorf("RequestBytes(%d) = %d; want %d", tt.contentLength, got, tt.want)
		}
	}
}

// sizedUpstream answers /size?n=N with N bytes, declared unless chunked=1.
func sizedUpstream(t *testing.T) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		if r.URL.Query().Get("status") == "204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Write(bytes.Repeat([]byte("r"), n))
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush()
		}
	})
}

// TestResponseCharge checks what a response adds to its request's
// reservation: a body the proxy buffers is charged when its headers arrive,
// a streamed one is not, and a body the memory bulkhead has no room for is
// streamed rather than buffered. Every body arrives whole either way.
func TestResponseCharge(t *testing.T) {
	const budget = RequestOverheadBytes + 20<<10
	for _, tt := range []struct {
		name       string
		max        int64
		query      string
		size       int
		wantCharge int64 // Outcome.Bytes beyond the request's own
	}{
		{"small body is buffered and charged", 0, "n=1000", 1000, 1000},
		{"largest buffered body", 0, fmt.Sprintf("n=%d", ResponseBufferBytes), ResponseBufferBytes, ResponseBufferBytes},
		{"larger body streams uncharged", 0, fmt.Sprintf("n=%d", ResponseBufferBytes+1), ResponseBufferBytes + 1, 0},
		{"chunked body streams uncharged", 0, "n=5000&chunked=1", 5000, 0},
		{"no body", 0, "n=0&status=204", 0, 0},
		{"fits the bulkhead", budget, "n=20000", 20000, 20000},
		{"no room: streamed instead", budget, "n=30000", 30000, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := sizedUpstream(t)
			tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded, MaxInFlightBytes: tt.max}, func(c *Config) {
				c.Reserve = RequestBytes
			})
			resp, body := doGet(t, tp.addr, "/size?"+tt.query)
			if resp.StatusCode/100 != 2 || len(body) != tt.size {
				t.Errorf("GET /size?%s = %d with %d bytes; want 2xx with %d", tt.query, resp.StatusCode, len(body), tt.size)
			}
			o := tp.rec.wait(t, 1)[0]
			if got := o.Bytes - RequestOverheadBytes; got != tt.wantCharge {
				t.Errorf("response charged %d bytes; want %d", got, tt.wantCharge)
			}
			tp.waitIdle(t)
		})
	}
}

// TestMemoryBulkheadHammer sends many concurrent requests with bodies and
// responses of random sizes through a proxy with a memory bulkhead, and
// checks its promise end to end: the bytes reserved never exceed the
// budget, requests beyond it are answered 503 rejected_memory, the others
// get their bodies whole, and nothing is held at the end.
func TestMemoryBulkheadHammer(t *testing.T) {
	const budget = 8*RequestOverheadBytes + 256<<10
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(bytes.Repeat([]byte("h"), n))
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Unbounded, MaxInFlightBytes: budget}, func(c *Config) {
		c.Reserve = RequestBytes
	})

	var worst atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			_, _, p := tp.limiter.TakePeaks()
			peak(&worst, max(p, tp.limiter.Stats().Bytes))
		}
	})

	var ok, rejected, wrong atomic.Int64
	client := &fasthttp.HostClient{Addr: tp.addr, MaxConns: 64}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for range 60 {
				n := r.IntN(2 * ResponseBufferBytes)
				req.Reset()
				req.SetRequestURI(fmt.Sprintf("http://hammer.test/h?n=%d", n))
				if r.IntN(2) == 0 {
					req.Header.SetMethod(fasthttp.MethodPost)
					req.SetBody(make([]byte, r.IntN(64<<10)))
				}
				if err := client.Do(req, resp); err != nil {
					wrong.Add(1)
					continue
				}
				switch {
				case resp.StatusCode() == 200 && len(resp.Body()) == n:
					ok.Add(1)
				case resp.StatusCode() == 503 && bytes.Contains(resp.Body(), []byte("memory")):
					rejected.Add(1)
				default:
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()

	if w := worst.Load(); w > budget {
		t.Errorf("bytes reserved reached %d; want at most the budget %d", w, budget)
	}
	if ok.Load() == 0 || rejected.Load() == 0 || wrong.Load() != 0 {
		t.Errorf("%d whole responses, %d rejected_memory, %d wrong; want some of the first two and none wrong", ok.Load(), rejected.Load(), wrong.Load())
	}
	if n := int64(tp.rec.count(RejectedMemory)); n != rejected.Load() {
		t.Errorf("rejected_memory outcomes = %d; want %d, one per 503", n, rejected.Load())
	}
	t.Logf("%d ok, %d rejected_memory, most reserved %d of %d", ok.Load(), rejected.Load(), worst.Load(), budget)
	tp.waitIdle(t)
}

// peak raises p to v if v is higher.
func peak(p *atomic.Int64, v int64) {
	for {
		old := p.Load()
		if v <= old || p.CompareAndSwap(old, v) {
			return
		}
	}
}

// TestBodyLargerThanTheWholeMemoryBulkhead: a request whose declared body
// alone is more than the whole memory bulkhead can never be admitted. It
// was answered 503 rejected_memory with a Retry-After, for ever; it is a
// body too large, 413 bad_request with no Retry-After, on HTTP/1.1 and
// HTTP/2 alike. A body that fits the bulkhead is forwarded.
func TestBodyLargerThanTheWholeMemoryBulkhead(t *testing.T) {
	t.Parallel()
	const budget = RequestOverheadBytes + 1000
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded, MaxInFlightBytes: budget}, func(c *Config) {
		c.Reserve = RequestBytes
	})
	for _, client := range []*http.Client{{}, h2cClient()} {
		for size, want := range map[int]int{1000: http.StatusOK, 1001: http.StatusRequestEntityTooLarge, 1 << 20: http.StatusRequestEntityTooLarge} {
			resp, err := client.Post("http://"+tp.addr+"/up", "text/plain", strings.NewReader(strings.Repeat("x", size)))
			if err != nil {
				t.Fatalf("a body of %d: %v", size, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			outcome := resp.Header.Get("Loomgate-Outcome")
			if resp.StatusCode != want || want == http.StatusRequestEntityTooLarge && (outcome != "bad_request" || resp.Header.Get("Retry-After") != "") {
				t.Errorf("%s, a body of %d beside a bulkhead of %d: %d, outcome %q, Retry-After %q; want %d (bad_request and no Retry-After if 413)",
					resp.Proto, size, budget, resp.StatusCode, outcome, resp.Header.Get("Retry-After"), want)
			}
		}
	}
	tp.waitIdle(t)
	if n := tp.rec.count(RejectedMemory); n != 0 {
		t.Errorf("%d rejected_memory outcomes; want none", n)
	}
}

// TestRejectedUploadGetsItsAnswer: a request with a large body, rejected
// before any of it is read (the only worker busy, no queue). Closed with
// the body still arriving, the connection was reset, and the reset threw
// away the 503 the client had not read yet: it saw "connection reset", no
// Retry-After, nothing saying it may try again. The answer now ends with a
// half-close, and what the client still sends is read and thrown away for
// a moment, so the client reads its 503 after it has sent everything.
func TestRejectedUploadGetsItsAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "ok")
	})
	defer close(release)
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 0}, nil)
	go func() {
		if resp, err := http.Get("http://" + tp.addr + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 1 })

	for _, size := range []int{256 << 10, 4 << 20} {
		c := dial(t, tp.addr)
		head := fmt.Sprintf("POST /up HTTP/1.1\r\nHost: test.local\r\nContent-Length: %d\r\n\r\n", size)
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		// The whole body, sent before the answer is read, as an uploading
		// client does: the answer has come and the connection was closed
		// by the time it looks.
		sent := make(chan error, 1)
		go func() {
			_, err := c.Write(make([]byte, size))
			sent <- err
		}()
		if err := <-sent; err != nil {
			t.Fatalf("a body of %d: the proxy stopped reading it: %v", size, err)
		}
		time.Sleep(100 * time.Millisecond)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Fatalf("a body of %d: no answer: %v", size, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Loomgate-Outcome") != "rejected_queue_full" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("a body of %d: %d %v; want 503 rejected_queue_full with Retry-After", size, resp.StatusCode, resp.Header)
		}
	}
	waitFor(t, func() bool { return tp.proxy.ClientConns() == 1 })
}
