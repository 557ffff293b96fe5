package proxy

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/limiter"
)

// benchUpstream is a fasthttp upstream on loopback: "/" answers a small
// body at once, "/hold" holds its request until release is closed.
type benchUpstream struct {
	addr    string
	release chan struct{}
	srv     *fasthttp.Server
}

func newBenchUpstream(tb testing.TB) *benchUpstream {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &benchUpstream{addr: ln.Addr().String(), release: make(chan struct{})}
	payload := []byte("hello, world")
	u.srv = &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/hold" {
			<-u.release
		}
		ctx.SetBody(payload)
	}}
	go u.srv.Serve(ln)
	tb.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.srv.Shutdown()
	})
	return u
}

// benchProxy serves a Proxy in front of up with the limiter lcfg and the
// configuration the sidecar uses (Server-Timing, reservations), and
// returns a client for it.
func benchProxy(tb testing.TB, up *benchUpstream, lcfg limiter.Config) (*fasthttp.HostClient, *limiter.Limiter) {
	tb.Helper()
	return benchProxyWith(tb, up, lcfg, admission.Priorities{})
}

// benchProxyWith is benchProxy with priorities at admission.
func benchProxyWith(tb testing.TB, up *benchUpstream, lcfg limiter.Config, prio admission.Priorities) (*fasthttp.HostClient, *limiter.Limiter) {
	tb.Helper()
	lim, err := limiter.New(lcfg)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := New(Config{
		Upstream:     "http://" + up.addr,
		Policy:       lim,
		Observer:     nopObserver{},
		MaxConns:     lim.Stats().Limit,
		ServerTiming: true,
		Reserve:      RequestBytes,
		Priorities:   prio,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go p.Serve(ln)
	tb.Cleanup(func() { p.server.Shutdown() })
	return &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 1024}, lim
}

// getLoop sends GET target with client until pb ends, expecting status.
func getLoop(b *testing.B, client *fasthttp.HostClient, target string, status int) {
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://bench.local" + target)
		for pb.Next() {
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != status {
				b.Errorf("Do = %v, status %d; want %d", err, resp.StatusCode(), status)
				return
			}
		}
	})
}

// BenchmarkProxy measures one small GET through the proxy on loopback, on
// each of the proxy's paths: admitted at once (in either mode), queued
// (every request waits for a permit), and rejected (every permit is held
// by a request parked at the upstream, and there is no queue). Client,
// proxy and upstream are all fasthttp, which allocates nothing per request
// once warm, so allocs/op is the proxy's own.
func BenchmarkProxy(b *testing.B) {
	for _, bc := range []struct {
		name   string
		lcfg   limiter.Config
		status int
		park   int // requests parked at the upstream for the whole run
		prio   admission.Priorities
	}{
		{"admitted/unbounded", limiter.Config{Mode: limiter.Unbounded}, 200, 0, admission.Priorities{}},
		{"admitted/fixed", limiter.Config{Mode: limiter.Fixed, Workers: 64, QueueSize: 1000, QueueTimeout: time.Second}, 200, 0, admission.Priorities{}},
		{"queued", limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 1000, QueueTimeout: 10 * time.Second}, 200, 0, admission.Priorities{}},
		// Priorities and fair queuing by client, every level with a share:
		// a level and a flow read at admission, the waiters in lanes.
		{"queued+priorities", limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 1000, QueueTimeout: 10 * time.Second,
			Priorities: true, Shares: [limiter.NumLevels]int{limiter.Critical: 50, limiter.Sheddable: 10}}, 200, 0,
			admission.Priorities{Header: "X-Priority", FlowClient: true}},
		{"rejected", limiter.Config{Mode: limiter.Fixed, Workers: 1}, 503, 1, admission.Priorities{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := newBenchUpstream(b)
			client, lim := benchProxyWith(b, up, bc.lcfg, bc.prio)
			var parked sync.WaitGroup
			for range bc.park {
				parked.Add(1)
				go func() {
					defer parked.Done()
					req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
					req.SetRequestURI("http://bench.local/hold")
					client.Do(req, resp)
				}()
			}
			for lim.Stats().InFlight < int64(bc.park) {
				time.Sleep(time.Millisecond)
			}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			reportCPU(b, func() { getLoop(b, client, "/item?id=1", bc.status) })
			close(up.release)
			parked.Wait()
		})
	}
}

// BenchmarkBareFasthttp is the same small GET through a bare fasthttp
// proxy (HostClient.Do from the handler, as a 40-line proxy would): the
// floor the proxy is measured against, and fasthttp's own allocations on
// that path.
func BenchmarkBareFasthttp(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "buffered"
		if stream {
			name = "StreamResponseBody"
		}
		b.Run(name, func(b *testing.B) {
			up := newBenchUpstream(b)
			hc := &fasthttp.HostClient{Addr: up.addr, MaxConns: 1024, StreamResponseBody: stream}
			srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
				if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
					ctx.Error("bad gateway", fasthttp.StatusBadGateway)
				}
			}}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(ln)
			defer srv.Shutdown()
			client := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 1024}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			reportCPU(b, func() { getLoop(b, client, "/item?id=1", 200) })
		})
	}
}

// TestAdmittedPathAllocatesNothing: a request admitted at once costs the
// proxy no allocation, from the request's reading to its response's
// writing, with Server-Timing and reservations on. The count is the whole
// process's, client and upstream included; fasthttp allocates nothing on
// their paths once warm (BenchmarkBareFasthttp/buffered shows it).
func TestAdmittedPathAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	up := newBenchUpstream(t)
	client, _ := benchProxy(t, up, limiter.Config{Mode: limiter.Unbounded})
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://bench.local/item?id=1")
	do := func() {
		if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("Do = %v, status %d", err, resp.StatusCode())
		}
	}
	for range 100 {
		do() // pools, connections and buffers are made here
	}
	if n := testing.AllocsPerRun(2000, do); n != 0 {
		t.Errorf("a request admitted at once allocates %v times; want 0", n)
	}
}

type nopObserver struct{}

func (nopObserver) Observe(*Outcome) {}

// BenchmarkProxyPost is BenchmarkProxy's admitted/unbounded with a POST of
// a small body, the size of a JSON call: a body fasthttp reads whole
// before the handler goes out with its request in one write.
func BenchmarkProxyPost(b *testing.B) {
	up := newBenchUpstream(b)
	client, _ := benchProxy(b, up, limiter.Config{Mode: limiter.Unbounded})
	body := bytes.Repeat([]byte("x"), 256)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	reportCPU(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://bench.local/item")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetBody(body)
			for pb.Next() {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Errorf("Do = %v, status %d; want 200", err, resp.StatusCode())
					return
				}
			}
		})
	})
}
